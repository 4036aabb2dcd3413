"""Old module names whose contents now live in more than one module: each re-exports what it used to hold,
so a notebook saved before the package had subpackages still imports (:data:`adapterlab.MOVED`)."""

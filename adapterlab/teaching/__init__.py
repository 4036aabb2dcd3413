"""Teaching: what a student or an instructor sees; these modules present what the layers below compute.

Split by whom each part serves:

* :mod:`.exercises` — the self-checks of every exercise (labs 1-10), what a student working alone learns from;
* :mod:`.notebook` — what a lab notebook shows: figures, the r / init-scale widgets, the training panel, small
  measurements (probes; lab 11's anatomy of a trained adapter) and the student and CI profiles' sizes;
* :mod:`.instructor` — the instructor's tools: student copies with solutions stubbed out, offline reveal.js
  decks and their PDFs, and where the labs are.

The labs import the modules by their short names (``from adapterlab.teaching import checks, plots``), as they
did before the split: ``adapterlab.teaching.<name>`` is the same module as its subpackage's (see
``adapterlab.MOVED``).
"""

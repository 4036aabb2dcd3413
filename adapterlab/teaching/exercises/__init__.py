"""The exercises' self-checks: each runs a student's answer where the lab really uses it and names the
mistake it sees (:mod:`.checks` for labs 1-5 and 7, :mod:`.checks_training` for the training labs,
:mod:`.checks_anatomy` for lab 11)."""

"""Teaching: what a student or an instructor sees; these modules present what the layers below compute.

* :mod:`.checks`, :mod:`.checks_training` — the self-checks of every exercise (labs 1-10);
* :mod:`.plots`, :mod:`.widgets`, :mod:`.panel` — figures, the r / init-scale widgets, the training panel;
* :mod:`.probes` — small measurements a lab shows (a GELU adapter's best linear fit, Adam's first step);
* :mod:`.anatomy` — what a trained model's adapters learned: change, linear share, folding, rank (lab 11);
* :mod:`.profiles` — the student and CI profiles' sizes;
* :mod:`.student`, :mod:`.labfiles` — student copies with solutions stubbed out;
* :mod:`.slides`, :mod:`.slide_layout`, :mod:`.slides_pdf` — offline reveal.js decks and their PDFs.
"""

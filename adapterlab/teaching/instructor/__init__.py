"""The instructor's tools: :mod:`.student` (student copies), :mod:`.slides`, :mod:`.slide_layout` and
:mod:`.slides_pdf` (offline decks and their PDFs), :mod:`.labfiles` (where the labs are)."""

"""What a lab notebook shows a student: :mod:`.plots` (every figure), :mod:`.widgets` and :mod:`.panel`
(the interactive parts), :mod:`.probes` and :mod:`.anatomy` (measurements a lab prints), :mod:`.profiles`
(how large a run the student and CI profiles make)."""

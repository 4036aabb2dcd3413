"""Take it with you: adapter sets to and from the libraries students use next.

* :mod:`.convert` — ``export`` and ``import`` of a run folder, the checks of what a target can hold;
* :mod:`.adapterhub` — AdapterHub's ``adapters`` folders (DoubleSeqBn = houlsby, SeqBn = pfeiffer,
  ParBn = parallel, and LoRA on query and value);
* :mod:`.peft` — Hugging Face PEFT's LoRA and IA3 folders.

Lab 5 names each placement's AdapterHub config; the tests load every export in the libraries themselves.
"""

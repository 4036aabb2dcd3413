"""The model: the adapter itself and what it does inside a BERT layer. Nothing here trains or reads data.

* :mod:`.adapter` — the bottleneck module, its nonlinearities (identity included) and init schemes (labs 1, 2);
* :mod:`.placement` — where adapters go in a BERT layer (houlsby, pfeiffer, parallel), switching them off
  per layer (labs 5, 8);
* :mod:`.trainable` — parameter groups, freezing down to a part, trainable counts (labs 5, 6);
* :mod:`.lora` — the LoRA layer and its surgery; :mod:`.fold` — folding a linear adapter into a weight (lab 3);
* :mod:`.counting` — closed forms beside module counts, BERT-large on the meta device (lab 4);
* :mod:`.latency` — inference timing, unmerged and merged (labs 9, 10).
"""

"""What ``adapterlab.counting`` held: the closed forms and counts of lab 4, and the methods' counts."""

from ..methods.bitfit import bert_bias_params  # noqa: F401
from ..methods.counts import compare_method_counts, method_counts  # noqa: F401
from ..model.counting import *  # noqa: F401,F403
from ..model.counting import _adapter_set, _row_labels, _state  # noqa: F401

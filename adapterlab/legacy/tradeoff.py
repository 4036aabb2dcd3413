"""What ``adapterlab.tradeoff`` held: the trade-off points (now :mod:`adapterlab.runs.tradeoff`) and their
figures (now :mod:`adapterlab.teaching.notebook.plots`)."""

from ..runs.tradeoff import *  # noqa: F401,F403
from ..runs.tradeoff import _config  # noqa: F401
from ..teaching.notebook.plots import curve_figure, tradeoff_figure  # noqa: F401

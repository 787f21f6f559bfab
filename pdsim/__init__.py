"""pdsim: a discrete-event simulator of prefill/decode disaggregated LLM serving.

Typical use::

    import pdsim
    cfg = pdsim.load_config("configs/mtp3.yaml", overrides=["workload.num_requests=500"])
    res = pdsim.simulate(cfg)
    res.summary["acceptance_length"], res.to_pandas()
"""

from pdsim._version import __version__
from pdsim.config import SimConfig
from pdsim.errors import ConfigError, InputFileError, PdsimError
from pdsim.loader import dump_config, load_config
from pdsim.results import Results
from pdsim.simulation import Simulation, simulate

__all__ = [
    "ConfigError", "InputFileError", "PdsimError", "Results", "SimConfig", "Simulation",
    "__version__", "dump_config", "load_config", "simulate",
]

"""Results: where plain arrays from the engine become xarray Datasets, files and timelines.

Nothing here simulates; the system layer hands over records (:class:`CollectiveRecord`,
:class:`RunRecord`, :class:`WorkloadRun`, :class:`SimulationStats`) and arrays. Names load on
first use: a record needs no xarray.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .collective import CollectiveRecord, collective_dataset
    from .io import write_dataset
    from .stats import SimulationStats, from_attrs, to_attrs
    from .workload import RunRecord, WorkloadRun, workload_dataset, write_csvs

_NAMES = {"CollectiveRecord": ".collective", "collective_dataset": ".collective",
          "write_dataset": ".io",
          "SimulationStats": ".stats", "from_attrs": ".stats", "to_attrs": ".stats",
          "RunRecord": ".workload", "WorkloadRun": ".workload",
          "workload_dataset": ".workload", "write_csvs": ".workload"}

__all__ = ["CollectiveRecord", "RunRecord", "SimulationStats", "collective_dataset",
           "WorkloadRun", "from_attrs", "to_attrs", "workload_dataset", "write_csvs",
           "write_dataset"]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())

"""Results: where plain arrays from the engine become xarray Datasets, files and timelines.

Nothing here simulates; the system layer hands over records (:class:`RunRecord`,
:class:`SimulationStats`) and arrays.
"""

from .collective import collective_dataset
from .io import write_dataset
from .stats import SimulationStats, from_attrs, to_attrs
from .workload import RunRecord, workload_dataset, write_csvs

__all__ = ["RunRecord", "SimulationStats", "collective_dataset", "from_attrs", "to_attrs",
           "workload_dataset", "write_csvs", "write_dataset"]

"""gpufailover: classify GPU training-job failures and fail over on hardware faults."""

__version__ = "0.1.0"

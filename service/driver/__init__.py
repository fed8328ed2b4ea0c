"""The driver: the batch lifecycle, recovery, the scheduler, Spark and the service's assembly."""

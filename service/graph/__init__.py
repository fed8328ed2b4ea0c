"""The job's graph: `StreamingContext`, DStreams and their operators, sources and outputs.

The graph describes what each batch computes; it never runs batches (that is `service.driver`).
"""

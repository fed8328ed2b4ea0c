"""What the driver tells people: metrics, the status board and page, HTTP, logs, backpressure."""

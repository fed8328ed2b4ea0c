#!/bin/sh
# kafka-server-start.sh PROPERTIES: the broker in the foreground.
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"

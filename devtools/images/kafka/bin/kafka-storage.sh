#!/bin/sh
# kafka-storage.sh format|info|random-uuid ...: the storage tool runs for about a second, and the
# C1 compiler alone starts it fastest.
KAFKA_HEAP_OPTS="-Xmx256m" \
KAFKA_JVM_PERFORMANCE_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" \
  exec /opt/kafka/bin/kafka-run-class.sh kafka.tools.StorageTool "$@"

#!/bin/sh
# java on Kafka's classpath with the JVM options the apache/kafka scripts read from the
# environment. The unquoted expansions are meant: each variable holds several options.
# shellcheck disable=SC2086
exec java ${KAFKA_HEAP_OPTS:-} ${KAFKA_JVM_PERFORMANCE_OPTS:-} \
  ${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties} \
  ${KAFKA_OPTS:-} -cp '/opt/kafka/libs/*' "$@"

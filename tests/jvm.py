"""The JVM options of the JVMs the tests start (drivers, and the cluster tier's executors)."""

# Short-lived JVMs: C1 alone compiles Spark's start-up path for about half the CPU of C1 and C2.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"

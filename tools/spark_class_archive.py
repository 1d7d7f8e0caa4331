"""The class archive (tools/class_archive.py) of the Spark JVMs the tests start: spark-submit
drivers and the standalone cluster's daemons, on the jars of the installed pyspark.

``make jars`` makes it (``python -m tools.spark_class_archive``) by running a small PySpark
job through spark-submit once; tests/conftest.py puts its option into ``SPARK_SUBMIT_OPTS``
and ``SPARK_DAEMON_JAVA_OPTS``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.class_archive import ClassArchive, ClassArchiveError
from tools.kafka.broker import require_java
from tools.spark_cluster import spark_home, spark_submit, submit_environment

ARCHIVE_DIR = Path(__file__).resolve().parents[1] / ".local" / "class-archives"
#: A job that starts what every driver of the tests starts: a SparkSession, tasks on two
#: cores and their Python workers.
JOB = """\
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("class-archive").getOrCreate()
assert spark.sparkContext.parallelize(range(10), 2).map(lambda x: x * 2).sum() == 90
spark.stop()
"""
#: The job's bound: it takes about 40 s on 2 cores while it writes the archive.
JOB_TIMEOUT_S = 600


def _java() -> str:
    """The java spark-class runs: JAVA_HOME's, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else require_java()


def spark_class_archive() -> ClassArchive:
    return ClassArchive("spark", _java(), spark_home() / "jars", ARCHIVE_DIR)


def run_job(dump_option: str, submit: str | None = None, timeout_s: float = JOB_TIMEOUT_S) -> str:
    """Run JOB through ``submit`` (spark-submit) with the archive's dump option to its exit, within
    ``timeout_s``; the tail of its output. A failed or overdue job is a ClassArchiveError."""
    with tempfile.TemporaryDirectory(prefix="spark-class-archive-") as scratch:
        job = Path(scratch) / "job.py"
        job.write_text(JOB)
        # a one-off JVM: the cheapest compiler and collector while it writes the archive
        env = {**submit_environment(),
               "SPARK_SUBMIT_OPTS": f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC {dump_option}"}
        try:
            result = subprocess.run([submit or spark_submit(), "--master", "local[2]", str(job)],
                                    capture_output=True, text=True, env=env, cwd=scratch, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ClassArchiveError(f"the spark-submit job writing the class archive took more than "
                                    f"{timeout_s:g} s (killed)") from None
        output = (result.stdout + result.stderr)[-3000:]
        if result.returncode != 0:
            raise ClassArchiveError(f"the spark-submit job writing the class archive failed (exit "
                                    f"{result.returncode}):\n{output}")
        return output


def build() -> Path:
    """The archive, made unless there is one for this JVM and these jars."""
    return spark_class_archive().make(run_job)


if __name__ == "__main__":
    try:
        print(build())
    except ClassArchiveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)

"""spark-submit drivers start on the class archive ``make jars`` made (tools/spark_class_archive.py):
the driver JVM of a job submitted as the tests submit theirs maps it."""

from __future__ import annotations

import os
import subprocess

from tools.spark_class_archive import build
from tools.spark_cluster import spark_submit, submit_environment

JOB = """\
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("maps").getOrCreate()
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
with open(f"/proc/{pid}/maps") as maps:
    print("ARCHIVE MAPPED" if sys.argv[1] in maps.read() else "ARCHIVE NOT MAPPED")
spark.stop()
"""


def test_a_driver_maps_the_spark_class_archive(tmp_path):
    archive = build()
    assert f"-XX:SharedArchiveFile={archive}" in os.environ["SPARK_SUBMIT_OPTS"]  # tests/conftest.py
    job = tmp_path / "job.py"
    job.write_text(JOB)
    result = subprocess.run([spark_submit(), "--master", "local[1]", str(job), str(archive)],
                            capture_output=True, text=True, env=submit_environment(), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ARCHIVE MAPPED" in result.stdout, result.stdout[-2000:]

#!/usr/bin/env bash
# EMR bootstrap action: the tracelake Python environment on every node (driver and executors).
#
#   --bootstrap-actions Path=s3://<bucket>/tracelake/bootstrap.sh,Args=[s3://<bucket>/tracelake]
#
# The argument is an S3 prefix holding requirements.lock and one tracelake wheel or sdist
# (`python -m pip wheel --no-deps -w dist .` / `python -m build --sdist`, see infra/cluster/README.md).
# Installs Python 3.11 and a venv at /opt/tracelake/venv with every pin of requirements.lock except:
#   torch            the Spark jobs never import it;
#   pyspark(-client) the cluster's own Spark (its python/lib/pyspark.zip) is the Python side of Spark.
# An sdist is compiled here (gcc, python3.11-devel) so that the native Kineto scanner matches the node.
set -euo pipefail
SRC="${1:?usage: bootstrap.sh s3://bucket/prefix}"
VENV=/opt/tracelake/venv
sudo dnf install -y -q python3.11 python3.11-devel python3.11-pip gcc
sudo mkdir -p /opt/tracelake && sudo chown "$(id -u):$(id -g)" /opt/tracelake
work="$(mktemp -d)"
aws s3 cp --quiet "${SRC%/}/requirements.lock" "$work/"
aws s3 cp --quiet --recursive --exclude "*" --include "tracelake-*" "${SRC%/}/" "$work/dist/"
grep -v -E '^(torch|pyspark|pyspark-client)==' "$work/requirements.lock" > "$work/requirements.emr.txt"
python3.11 -m venv "$VENV"
"$VENV/bin/pip" install -q -U pip
# --no-deps: the lock is complete; a resolver would pull pyspark-client back in (airflow spark provider)
"$VENV/bin/pip" install -q --no-deps -r "$work/requirements.emr.txt"
pkg="$(ls "$work"/dist/tracelake-* | sort | tail -n 1)"
"$VENV/bin/pip" install -q --no-deps "$pkg"
# the spark-submit application and what the non-Spark steps (publish, fleet report) import, with the venv alone
"$VENV/bin/python" -c "import jobs.normalize.kineto.parse, jobs.analyze.job, jobs.pipeline.submit, jobs.publish.job_runs; print('tracelake ok')"
rm -rf "$work"

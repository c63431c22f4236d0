#!/usr/bin/env bash
# Install the job sandbox's tools when missing (Debian/Ubuntu): bubblewrap, slirp4netns,
# and nsenter/ip (util-linux, iproute2). Needs root to install; otherwise says what to run.
set -euo pipefail
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v slirp4netns >/dev/null || missing+=(slirp4netns)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v ip >/dev/null || missing+=(iproute2)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq && apt-get install -y -qq "${missing[@]}"
else
  echo "The job sandbox needs: ${missing[*]} (e.g. sudo apt-get install ${missing[*]})." >&2
  echo "Without them the agents refuse to start (or pass --unsafe-no-sandbox to run jobs unsealed)." >&2
  exit 1
fi

#!/usr/bin/env bash
# Install the job sandbox's tools when missing (Debian/Ubuntu): bubblewrap, slirp4netns,
# and nsenter/ip (util-linux, iproute2): required. And podman with runc and catatonit (its
# --init), so the local agents run image jobs (issue 23: Debian's default crun refuses hybrid
# cgroup hosts): wanted, not required (without them the agents take no image job).
# Needs root to install; otherwise says what to run.
set -euo pipefail
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v slirp4netns >/dev/null || missing+=(slirp4netns)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v ip >/dev/null || missing+=(iproute2)
wanted=()
command -v podman >/dev/null || wanted+=(podman)
command -v runc >/dev/null || wanted+=(runc)
[ -x /usr/libexec/podman/catatonit ] || wanted+=(catatonit)
[ ${#missing[@]} -eq 0 ] && [ ${#wanted[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  if [ ${#missing[@]} -gt 0 ]; then apt-get install -y -qq --no-install-recommends "${missing[@]}"; fi
  if [ ${#wanted[@]} -gt 0 ] && ! apt-get install -y -qq --no-install-recommends "${wanted[@]}"; then
    echo "Could not install ${wanted[*]}: the agents will take no image job (work.image)." >&2
  fi
  exit 0
fi
if [ ${#wanted[@]} -gt 0 ]; then
  echo "Image jobs need: ${wanted[*]} (e.g. sudo apt-get install ${wanted[*]}); without them the agents take none." >&2
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "The job sandbox needs: ${missing[*]} (e.g. sudo apt-get install ${missing[*]})." >&2
  echo "Without them the agents refuse to start (or pass --unsafe-no-sandbox to run jobs unsealed)." >&2
  exit 1
fi

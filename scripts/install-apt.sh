#!/usr/bin/env bash
# Installs the Debian packages in scripts/apt-packages.txt that are missing; needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t wanted < <(grep -v -e '^#' -e '^$' "$here/apt-packages.txt")
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then echo "apt: all ${#wanted[@]} packages present"; exit 0; fi
if [ "$(id -u)" -ne 0 ]; then echo "apt: missing ${missing[*]}; run as root or install them" >&2; exit 1; fi
echo "apt: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# Re-fetch the dashboard's charting library (uPlot, MIT) from npm into the package:
#   src/merkat/web/static/vendor/uPlot.iife.min.js, uPlot.min.css, uPlot.LICENSE
# The files are committed: the dashboard never loads anything from a CDN at run time.
# Usage: scripts/vendor-uplot.sh [VERSION]   (default: the pinned version below)
set -euo pipefail
VERSION="${1:-1.6.32}"
DEST="$(cd "$(dirname "$0")/.." && pwd)/src/merkat/web/static/vendor"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
npm pack --silent "uplot@$VERSION" >/dev/null
tar xzf "uplot-$VERSION.tgz"
mkdir -p "$DEST"
cp package/dist/uPlot.iife.min.js package/dist/uPlot.min.css "$DEST/"
cp package/LICENSE "$DEST/uPlot.LICENSE"
echo "uplot $VERSION ($(sha256sum "uplot-$VERSION.tgz" | cut -c1-16)...) -> $DEST" >&2

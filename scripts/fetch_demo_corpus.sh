#!/usr/bin/env bash
# Collects the demo model's training corpus from Debian packages into a folder of UTF-8 JSON Lines files.
#
#   scripts/fetch_demo_corpus.sh [OUT_DIR]          (default: .demo-corpus, relative to the repo root)
#
# Every source is public domain or under a permissive licence (see tools/train_demo/README.md and the
# SOURCES.md written into OUT_DIR). The packages are downloaded with `apt-get download` and unpacked with
# `dpkg-deb -x` into a cache folder, so nothing is installed system-wide and no service is started; only
# when the package lists are missing does the script run `apt-get update` (needs root). The one program it
# runs from a package is `bible` (bible-kjv) to print the King James text; if the unpacked binary cannot
# run here, it falls back to `apt-get install bible-kjv`.
#
# Environment: LMX_DEMO_DEB_CACHE  cache folder for .deb files (default ${XDG_CACHE_HOME:-$HOME/.cache}/lmx/demo-debs)
#              PYTHON              python interpreter (default python3; only the standard library is used)
#
# Idempotent: OUT_DIR is rebuilt in a temporary folder and swapped in only when everything succeeded.
# Output: kjv.jsonl, fortunes.jsonl, devils-dictionary.jsonl, jargon.jsonl, wordnet.jsonl,
#         python-docs.jsonl, python-api.jsonl, SOURCES.md, LICENSES/<package>.copyright, SHA256SUMS.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="${1:-$repo_root/.demo-corpus}"
cache="${LMX_DEMO_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lmx/demo-debs}"
python="${PYTHON:-python3}"
max_total_mb=40

# package -> licence of the part we use (checked against /usr/share/doc/<package>/copyright)
packages=(bible-kjv-text bible-kjv fortunes-min fortunes fortunes-bofh-excuses dict-devil dict-jargon
          wordnet-base python3.11-doc)
declare -A licence=(
  [bible-kjv-text]="Public domain (King James Version, 1611; the Debian copyright file notes the copyright has expired)"
  [bible-kjv]="GPL-2+ (program only; used to print the text, not part of the corpus)"
  [fortunes-min]="BSD-3-Clause (fortune-mod and its data files, as distributed by Debian)"
  [fortunes]="BSD-3-Clause (fortune-mod and its data files, as distributed by Debian)"
  [fortunes-bofh-excuses]="Public domain (placed there by its author, per the Debian copyright file)"
  [dict-devil]="Public domain (The Devil's Dictionary, Ambrose Bierce, 1911; copyright expired)"
  [dict-jargon]="Public domain (The Jargon File 4.4.7; 'in the public domain, to be freely used, shared, and modified')"
  [wordnet-base]="WordNet 3.0 licence (permissive, BSD-like; notice reproduced in LICENSES/wordnet-base.copyright)"
  [python3.11-doc]="PSF License Agreement (Python 3.11 documentation)"
)
declare -A used=(
  [bible-kjv-text]="kjv.jsonl: all 31,102 verses"
  [bible-kjv]="-"
  [fortunes-min]="fortunes.jsonl: fortunes, literature, riddles"
  [fortunes]="fortunes.jsonl: 24 of the topic files (no song lyrics, comic/TV quotes, ethnic/sex/drug/political humour)"
  [fortunes-bofh-excuses]="fortunes.jsonl: bofh-excuses"
  [dict-devil]="devils-dictionary.jsonl: every entry"
  [dict-jargon]="jargon.jsonl: every entry"
  [wordnet-base]="wordnet.jsonl: glosses of synsets with a sense tagged in the semantic concordance"
  [python3.11-doc]="python-docs.jsonl (tutorial, library, reference, howto, faq, glossary) and python-api.jsonl"
)

log() { echo "[fetch_demo_corpus] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v apt-get >/dev/null || die "apt-get not found: this script needs a Debian-based system"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found"
command -v "$python" >/dev/null || die "python interpreter '$python' not found"

mkdir -p "$cache/debs"
cd "$cache/debs"

download() {
  # apt-get download prints a harmless warning when run as root in a folder _apt cannot write
  apt-get download "$@" 2> >(grep -v "Download is performed unsandboxed" >&2)
}
missing=()
for p in "${packages[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  log "downloading ${missing[*]}"
  if ! download "${missing[@]}"; then
    if [[ $(id -u) -eq 0 ]]; then
      log "apt-get download failed; running apt-get update and retrying"
      apt-get update -qq
      download "${missing[@]}" || die "apt-get download ${missing[*]} failed"
    else
      die "apt-get download failed; run 'sudo apt-get update' and try again"
    fi
  fi
fi

rm -rf "$cache/root"
mkdir -p "$cache/root"
declare -A version debfile
for p in "${packages[@]}"; do
  # newest downloaded version if several are cached
  deb="$(ls -1 "${p}"_*.deb | sort -V | tail -n 1)"
  [[ -f "$deb" ]] || die "no .deb for $p"
  version[$p]="$(dpkg-deb -f "$deb" Version)"
  debfile[$p]="$deb"
  dpkg-deb -x "$deb" "$cache/root/$p"
done

tmp_out="$(mktemp -d "${out_dir%/}.tmp.XXXXXX")"
chmod 755 "$tmp_out"
trap 'rm -rf "$tmp_out"' EXIT

# King James text, one verse a line ("Ge1:1 In the beginning ...").
kjv_txt="$cache/kjv.txt"
bible_bin="$cache/root/bible-kjv/usr/bin/bible"
if ! "$bible_bin" -f -p "$cache/root/bible-kjv-text/usr/lib" Gen1:1-Rev22:21 >"$kjv_txt" 2>"$cache/bible.err"; then
  log "unpacked bible binary failed ($(head -c 200 "$cache/bible.err")); installing bible-kjv with apt-get"
  [[ $(id -u) -eq 0 ]] || die "need root to apt-get install bible-kjv"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bible-kjv >/dev/null
  bible -f Gen1:1-Rev22:21 >"$kjv_txt" || die "bible -f failed"
fi

"$python" "$repo_root/tools/train_demo/corpus_extract.py" --root "$cache/root" --out "$tmp_out" --kjv-text "$kjv_txt"

mkdir -p "$tmp_out/LICENSES"
for p in "${packages[@]}"; do
  [[ $p == bible-kjv ]] && continue
  cp "$cache/root/$p/usr/share/doc/$p/copyright" "$tmp_out/LICENSES/$p.copyright" 2>/dev/null ||
    die "no copyright file in package $p"
done

{
  echo "# Demo corpus sources"
  echo
  echo "Made by scripts/fetch_demo_corpus.sh from Debian $(cat /etc/debian_version 2>/dev/null || echo '?') packages"
  echo "($(uname -m)). Each package's copyright file is in LICENSES/."
  echo
  echo "| package | version | licence | used for | .deb sha256 |"
  echo "|---|---|---|---|---|"
  for p in "${packages[@]}"; do
    sha="$(sha256sum "${debfile[$p]}" | cut -c1-16)…"
    echo "| $p | ${version[$p]} | ${licence[$p]} | ${used[$p]} | \`$sha\` |"
  done
  echo
  echo "## Files"
  echo
  echo "| file | records | MB |"
  echo "|---|---|---|"
  for f in "$tmp_out"/*.jsonl; do
    echo "| $(basename "$f") | $(wc -l <"$f") | $(awk -v b="$(stat -c %s "$f")" 'BEGIN{printf "%.2f", b/1e6}') |"
  done
  echo
  echo "Every line of a .jsonl file is one JSON object with a \"text\" field; see tools/train_demo/corpus_extract.py."
  echo "WordNet notice: WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. (Full licence in"
  echo "LICENSES/wordnet-base.copyright; it must accompany every copy.)"
} >"$tmp_out/SOURCES.md"

(cd "$tmp_out" && sha256sum ./*.jsonl >SHA256SUMS)

total_bytes="$(du -sb "$tmp_out" | cut -f1)"
if ((total_bytes > max_total_mb * 1000 * 1000)); then
  die "corpus is $((total_bytes / 1000000)) MB, over the ${max_total_mb} MB budget"
fi

rm -rf "$out_dir"
mv "$tmp_out" "$out_dir"
trap - EXIT
log "wrote $out_dir ($((total_bytes / 1000)) kB)"
cat "$out_dir/SOURCES.md" >&2

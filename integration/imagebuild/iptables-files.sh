#!/usr/bin/env bash
# Prints the imagebuild arguments (-file DST=SRC, -symlink DST=TARGET) that
# put this machine's iptables into an image, for the node agent's repair:
# xtables-nft-multi and xtables-legacy-multi with the iptables/ip6tables
# {,-save,-restore} names of both backends, every xtables extension module,
# the shared libraries ldd reports for all of them, and the dynamic loader.
# Paths inside the image are the paths ldd and the binaries use here, so the
# loader and libxtables find everything where they look for it.
# Needs the Debian package iptables (integration/cluster/deps.sh installs it).
set -euo pipefail

SBIN=/usr/sbin
XT_DIR=$(dirname "$(readlink -f "$(ldd "$SBIN/xtables-nft-multi" | awk '/libxtables/ {print $3}')")")/xtables

die() { echo "iptables-files.sh: $*" >&2; exit 1; }

[ -x "$SBIN/xtables-nft-multi" ] && [ -x "$SBIN/xtables-legacy-multi" ] ||
	die "xtables-nft-multi and xtables-legacy-multi not in $SBIN (apt-get install iptables)"
[ -d "$XT_DIR" ] || die "no xtables extension dir at $XT_DIR"

declare -A files=() # image path -> source file

add_file() { files[$1]=$(readlink -f "$1"); }

# add_libs BINARY: the libraries and loader ldd resolves for BINARY.
add_libs() {
	local line path
	while read -r line; do
		case "$line" in
		*"=> not found"*) die "ldd $1: $line" ;;
		*"=> /"*) path=${line#*=> }; path=${path%% (*} ;;
		/*) path=${line%% (*} ;;
		*) continue ;; # linux-vdso and the like
		esac
		add_file "$path"
	done < <(ldd "$1")
}

for multi in xtables-nft-multi xtables-legacy-multi; do
	add_file "$SBIN/$multi"
	add_libs "$SBIN/$multi"
done
for backend in nft legacy; do
	for tool in iptables ip6tables; do
		for suffix in "" -save -restore; do
			echo "-symlink=$SBIN/$tool-$backend$suffix=xtables-$backend-multi"
		done
	done
done

for ext in "$XT_DIR"/*.so; do
	if [ -L "$ext" ]; then
		# e.g. libxt_state.so -> libxt_conntrack.so: keep the link.
		echo "-symlink=$ext=$(readlink "$ext")"
		continue
	fi
	add_file "$ext"
	add_libs "$ext"
done

for dst in $(printf '%s\n' "${!files[@]}" | sort); do
	echo "-file=$dst=${files[$dst]}"
done

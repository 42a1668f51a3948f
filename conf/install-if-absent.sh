#!/bin/sh
# install-if-absent.sh SRC DIR MODE — meson install script: copy SRC into $DESTDIR/DIR with MODE
# unless a file of that name is already there (an operator's configuration is never replaced).
set -eu
src=$1 dir=${DESTDIR:-}$2 mode=$3
dest=$dir/$(basename "$src")
if [ -e "$dest" ] || [ -L "$dest" ]; then
        echo "Keeping existing $dest"
        exit 0
fi
if [ -n "${MESON_INSTALL_DRY_RUN:-}" ]; then
        echo "Would install $src to $dir"
        exit 0
fi
mkdir -p "$dir"
cp "$src" "$dest.tmp.$$"
chmod "$mode" "$dest.tmp.$$"
mv -f "$dest.tmp.$$" "$dest"
echo "Installing $src to $dir"

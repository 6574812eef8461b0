#!/usr/bin/env bash
# Installs bgd, bgctl, bgd-confine and bgrelay (release, Swift's standard library linked in where the
# toolchain can) under PREFIX (default ~/.local), with the README and docs, man pages (`man bgctl`)
# and bgctl's shell completions. Every file it adds is listed in PREFIX/share/swift-background/installed-files,
# which --uninstall removes; the user's state (apps, history) stays unless --purge is given.
#
#   Scripts/install.sh                    # build and install to ~/.local
#   PREFIX=/opt/bg Scripts/install.sh     # elsewhere
#   Scripts/install.sh --uninstall [--purge]
#   Scripts/install.sh --from DIR         # install binaries already built in DIR (no build)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${PREFIX:-$HOME/.local}
manifest="$prefix/share/swift-background/installed-files"
mode=install from="" purge=false
while [ $# -gt 0 ]; do
    case "$1" in
        --uninstall) mode=uninstall ;;
        --purge) purge=true ;;
        --from) from=${2:?--from needs a directory}; shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done

if [ "$mode" = uninstall ]; then
    if [ ! -f "$manifest" ]; then
        echo "install.sh: nothing installed under $prefix (no $manifest)" >&2
        exit 1
    fi
    units=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
    unit=$units/bgd.service
    if [ -f "$unit" ] && grep -q "^ExecStart=$prefix/bin/bgd" "$unit"; then
        # Both units `bgctl install-service` wrote (bgd.service and bgd.socket, which would
        # otherwise start a bgd that is gone): the installed bgctl stops, disables and removes
        # them and has systemd forget them.
        if ! "$prefix/bin/bgctl" uninstall-service; then
            systemctl --user disable --now bgd.socket bgd >/dev/null 2>&1 || true
            rm -f "$unit" "$units/bgd.socket"
            echo "removed $unit and $units/bgd.socket (they ran this bgd)"
        fi
    fi
    dirs=()
    while IFS= read -r file; do rm -f "$file"; dirs+=("$(dirname "$file")"); done < "$manifest"
    rm -f "$manifest"
    dirs+=("$(dirname "$manifest")")
    # The directories the install made and left empty go too (bin, share/man/man1, …), as a
    # package manager's removal does; never $prefix itself, nor one that still holds anything.
    for dir in "${dirs[@]}"; do
        while [ "$dir" != "$prefix" ] && [ "${dir#"$prefix"/}" != "$dir" ] && rmdir "$dir" 2>/dev/null; do
            dir=$(dirname "$dir")
        done
    done
    echo "removed swift-background from $prefix"
    state=${XDG_STATE_HOME:-$HOME/.local/state}/bgd
    if $purge; then
        rm -rf "$state"
        echo "removed bgd's state in $state"
    elif [ -d "$state" ]; then
        echo "kept bgd's state in $state (apps, history); --purge removes it"
    fi
    exit 0
fi

if [ -z "$from" ]; then
    static=()
    # --static-swift-stdlib: the binaries run without the toolchain's libraries installed.
    if swift build --help 2>/dev/null | grep -q -- --static-swift-stdlib; then static=(--static-swift-stdlib); fi
    echo "building release bgd, bgctl, bgd-confine and bgrelay ${static[*]} (a first build takes several minutes)…" >&2
    for product in bgd bgctl bgd-confine bgrelay; do
        swift build -c release "${static[@]}" --scratch-path .build-install --product "$product" >&2
    done
    from=$(swift build -c release "${static[@]}" --scratch-path .build-install --show-bin-path)
fi
for product in bgd bgctl bgd-confine bgrelay; do
    [ -x "$from/$product" ] || { echo "install.sh: no $product in $from" >&2; exit 1; }
done

installed=()
put() {  # put MODE SOURCE DESTINATION [install's options]
    install -D -m "$1" "${@:4}" "$2" "$3"
    installed+=("$3")
}
# Stripped where strip(1) is there: the symbols are most of a Swift binary's size.
strip_option=()
command -v strip >/dev/null && strip_option=(-s)
for product in bgd bgctl bgd-confine bgrelay; do put 755 "$from/$product" "$prefix/bin/$product" "${strip_option[@]}"; done
put 644 README.md "$prefix/share/doc/swift-background/README.md"
for page in bgctl bgd bgrelay; do put 644 "docs/man/$page.1" "$prefix/share/man/man1/$page.1"; done
for doc in docs/*.md; do put 644 "$doc" "$prefix/share/doc/swift-background/$doc"; done
completions=$(mktemp -d)
trap 'rm -rf "$completions"' EXIT
"$prefix/bin/bgctl" --generate-completion-script bash > "$completions/bgctl.bash"
"$prefix/bin/bgctl" --generate-completion-script zsh > "$completions/_bgctl"
"$prefix/bin/bgctl" --generate-completion-script fish > "$completions/bgctl.fish"
put 644 "$completions/bgctl.bash" "$prefix/share/bash-completion/completions/bgctl"
put 644 "$completions/_bgctl" "$prefix/share/zsh/site-functions/_bgctl"
put 644 "$completions/bgctl.fish" "$prefix/share/fish/vendor_completions.d/bgctl.fish"
mkdir -p "$(dirname "$manifest")"
printf '%s\n' "${installed[@]}" > "$manifest"

echo "installed bgd, bgctl, bgd-confine and bgrelay in $prefix/bin (docs in $prefix/share/doc/swift-background)"
case ":$PATH:" in *":$prefix/bin:"*) ;; *) echo "add $prefix/bin to your PATH" ;; esac
echo "run it as a systemd user service: $prefix/bin/bgctl install-service && systemctl --user daemon-reload && systemctl --user enable --now bgd"
case "$prefix" in
    "$HOME"/*|/home/*|/root/*) echo "a push relay for your devices as a system service wants bgrelay outside any home directory: sudo PREFIX=/usr/local Scripts/install.sh, then bgrelay systemd-unit --help" ;;
    *) echo "a push relay for your devices, as a system service: $prefix/bin/bgrelay systemd-unit -- --host 0.0.0.0 | sudo tee /etc/systemd/system/bgrelay.service" ;;
esac
echo "remove it: Scripts/install.sh --uninstall (PREFIX=$prefix)"

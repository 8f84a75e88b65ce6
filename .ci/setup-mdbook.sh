# Sourced by .ci/run (and usable by hand: `source .ci/setup-mdbook.sh`): installs mdBook, which builds the book in
# docs/ (`mdbook build docs`), from its crate into the CI cache, and exports where it is. Idempotent: a second run
# installs nothing (a stamp names the version). A cold install compiles mdBook (without its `serve` and `watch`
# features, which building the book does not use): a few minutes on 2 cores.
#   REINS_MDBOOK  the mdbook binary; crates/reins-cli/tests/docs.rs builds the book with it when it is set
_reins_mdbook_setup() {
    local root="${REINS_CI_CACHE:-$HOME/.cache/reins-ci}/mdbook"
    local version="0.5.4"
    local stamp="$root/.installed-$version"
    if [ ! -f "$stamp" ] || [ ! -x "$root/bin/mdbook" ]; then
        echo "setup-mdbook: installing mdbook $version into $root" >&2
        cargo install mdbook --locked --version "$version" --no-default-features --features search --root "$root" --quiet >&2 || return 1
        touch "$stamp"
    fi
    export REINS_MDBOOK="$root/bin/mdbook"
}
_reins_mdbook_setup || echo "setup-mdbook: installing mdbook failed; the book test will say what is missing" >&2
unset -f _reins_mdbook_setup

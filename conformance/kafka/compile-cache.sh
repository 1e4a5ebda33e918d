# Sourced by run.sh and bench/run.sh: Java sources compiled once per Kafka classpath, into a cache
# directory outside the repository ($KPURGATORY_CACHE, by default ~/.cache/kpurgatory), so that later runs start at once.

# kafka_cache NAME TAG CLASSPATH FILE...: sets `cache` to NAME's build directory for FILE... against CLASSPATH, keyed by
# TAG, the files (the sources and the scripts that build them), the classpath, its entries' times and sizes and the JDK.
kafka_cache() {
    local name=$1 tag=$2 classpath=$3 key
    shift 3
    set -f  # classpath entries such as lib/* are for java, not for the shell
    key=$({ echo "$tag"; cat "${BASH_SOURCE[0]}" "$@"; echo "$classpath"
            IFS=:; for entry in $classpath; do stat -c '%n %Y %s' "$entry" 2>/dev/null || true; done
            readlink -f "$(command -v javac)"; } | sha256sum | cut -c1-16)
    set +f
    cache=${KPURGATORY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kpurgatory}/$name/$key
}

# kafka_compile WHAT ERA CLASSPATH JAVAC-ARGUMENT...: unless `cache` holds a build already, compiles into it (then calls
# kafka_compiled BUILD-DIRECTORY, if the caller defines it); if javac fails, exits 3 with its errors and a line saying
# that WHAT does not compile against CLASSPATH.
kafka_compile() {
    local what=$1 era=$2 classpath=$3 building
    shift 3
    [ ! -e "$cache/.compiled" ] || return 0
    mkdir -p "$(dirname "$cache")"
    building=$(mktemp -d "$cache.XXXXXX")
    if ! javac -nowarn -d "$building" -cp "$classpath" "$@" >&2; then
        rm -rf "$building"
        echo "run.sh: $what does not compile against $classpath (is it Kafka of the $era era, with its dependencies?)" >&2
        exit 3
    fi
    echo 'log4j.rootLogger=OFF' > "$building/log4j.properties"  # Kafka before 1.1 logs through log4j 1: silence it
    if declare -F kafka_compiled >/dev/null && ! kafka_compiled "$building" >&2; then  # the caller's last step, if any
        rm -rf "$building"
        echo "run.sh: $what compiled, but its last step failed" >&2
        exit 3
    fi
    touch "$building/.compiled"
    mv -T "$building" "$cache" 2>/dev/null || rm -rf "$building"  # a concurrent first run got there first
}

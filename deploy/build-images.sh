#!/usr/bin/env bash
# Builds, from nothing, what `podman-compose -f deploy/compose.yaml up -d` needs on a Debian 12
# machine that reaches Debian's and NuGet's package registries but no image registry:
#
#   1. podman, podman-compose, runc and debootstrap (apt-get), if missing;
#   2. podman's settings for such a machine (/etc/containers/containers.conf.d/50-farm.conf):
#      runc with cgroupfs and no default ulimits (crun, systemd cgroups and the default nofile
#      ulimit fail here);
#   3. localhost/farm-debian:bookworm: `debootstrap --variant=minbase bookworm`, imported;
#   4. localhost/farm-dotnet-aspnet:10.0 and localhost/farm-dotnet-sdk:10.0: that base plus this
#      machine's own .NET (deploy/local/dotnet.Containerfile), standing in for Microsoft's images;
#   5. localhost/farm-postgres:15: Debian's PostgreSQL (deploy/local/postgres.Containerfile),
#      standing in for postgres:16;
#   6. localhost/farm-node:dev: deploy/Dockerfile on those bases, restoring offline from this
#      machine's NuGet packages folder (the build container needs no network for NuGet);
#   7. deploy/.env, which tells compose.yaml to use the local PostgreSQL image.
#
# Idempotent: steps 1-4 are skipped when already done (--rebuild-bases redoes 3 and 4); 5 and 6
# always run and take seconds when nothing changed (podman's layer cache). Run as root.
# Usage: deploy/build-images.sh [--rebuild-bases]
set -euo pipefail

deploy="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$deploy")"

base_image="${FARM_BASE_IMAGE:-localhost/farm-debian:bookworm}"
aspnet_image="localhost/farm-dotnet-aspnet:10.0"
sdk_image="localhost/farm-dotnet-sdk:10.0"
postgres_image="${FARM_POSTGRES_IMAGE:-localhost/farm-postgres:15}"
node_image="${FARM_NODE_IMAGE:-localhost/farm-node:dev}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
rebuild_bases=false
case "${1:-}" in
  "") ;;
  --rebuild-bases) rebuild_bases=true ;;
  -h | --help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "build-images.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

exec 3>&2 # the timings and progress lines, whatever a step's output is redirected to
say() { printf '\n== %s\n' "$*" >&3; }
die() { echo "build-images.sh: $*" >&2; exit 1; }
# Runs a step and says how long it took.
timed() {
  local label="$1" start=$SECONDS
  shift
  "$@"
  printf '   %s: %ds\n' "$label" "$((SECONDS - start))" >&3
}

[[ $EUID -eq 0 ]] || die "run as root (podman runs the farm's containers as root on this machine)."

# 1. Packages.
missing=()
for package in podman podman-compose runc debootstrap; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  timed "apt-get" bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null' _ "${missing[@]}"
fi

# 2. podman's settings (a drop-in: /etc/containers/containers.conf stays the operator's).
conf=/etc/containers/containers.conf.d/50-farm.conf
wanted='# Written by Farm'"'"'s deploy/build-images.sh: crun fails on this kind of machine'"'"'s rlimits and
# hybrid cgroups, and the default nofile ulimit cannot be set here.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"'
if [[ "$(cat "$conf" 2>/dev/null)" != "$wanted" ]]; then
  say "writing $conf"
  mkdir -p "$(dirname "$conf")"
  printf '%s\n' "$wanted" >"$conf"
fi

# 3. The Debian base image.
if $rebuild_bases || ! podman image exists "$base_image"; then
  say "making $base_image with debootstrap (minbase, bookworm) from $mirror"
  work="$(mktemp -d /var/tmp/farm-debootstrap.XXXXXX)"
  trap 'rm -rf "$work"' EXIT
  timed "debootstrap" debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)."; }
  cat >"$work/rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security_mirror bookworm-security main
EOF
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  timed "podman import" bash -c 'tar -C "$1/rootfs" --numeric-owner -c . | podman import -q --change "CMD [\"/bin/bash\"]" --change "ENV LANG=C.UTF-8" - "$2" >/dev/null' \
    _ "$work" "$base_image"
  rm -rf "$work"
  trap - EXIT
fi

# 4. The .NET base images: a copy of this machine's .NET (the SDK is needed here anyway).
command -v dotnet >/dev/null || die "the .NET 10 SDK must be installed on this machine (the local SDK image copies it)."
dotnet_root="$(dirname "$(readlink -f "$(command -v dotnet)")")"
dotnet --list-sdks | grep -q '^10\.' || die "no .NET 10 SDK in $dotnet_root (dotnet --list-sdks)."
for target in aspnet sdk; do
  image="$aspnet_image"; [[ $target == sdk ]] && image="$sdk_image"
  if $rebuild_bases || ! podman image exists "$image"; then
    say "building $image from $dotnet_root"
    timed "$image" podman build -q --format docker -f "$deploy/local/dotnet.Containerfile" --target "$target" \
      --build-arg BASE_IMAGE="$base_image" -t "$image" "$dotnet_root" >/dev/null
  fi
done

# 5. PostgreSQL.
say "building $postgres_image"
timed "$postgres_image" podman build -q --format docker -f "$deploy/local/postgres.Containerfile" \
  --build-arg BASE_IMAGE="$base_image" -t "$postgres_image" "$deploy/local" >/dev/null

# 6. The Farm node. The host's restore fills its packages folder (from the registry it reaches);
# the build container restores from that folder, mounted read-only, with no network.
packages="$(dotnet nuget locals global-packages --list | sed -n 's/^global-packages: *//p')"
packages="${packages%/}"
[[ -n "$packages" ]] || die "cannot tell where NuGet's global packages folder is (dotnet nuget locals global-packages --list)."
say "restoring src/Gateway and src/Cli on the host into $packages"
for project in src/Gateway/Farm.Gateway.csproj src/Cli/Farm.Cli.csproj; do
  timed "restore $project" dotnet restore "$root/$project" -nologo -v quiet >/dev/null
done
say "building $node_image (deploy/Dockerfile)"
timed "$node_image" podman build --format docker -f "$deploy/Dockerfile" --ignorefile "$deploy/Dockerfile.dockerignore" \
  --build-arg SDK_IMAGE="$sdk_image" --build-arg RUNTIME_IMAGE="$aspnet_image" \
  --build-arg NUGET_SOURCE=/nuget-packages -v "$packages:/nuget-packages:ro" \
  -t "$node_image" "$root" >"${TMPDIR:-/tmp}/farm-node-build.log" 2>&1 \
  || { grep -E 'error|Error' "${TMPDIR:-/tmp}/farm-node-build.log" | tail -20 >&2; die "the node image did not build (log: ${TMPDIR:-/tmp}/farm-node-build.log)."; }

# 7. compose.yaml's variables for this machine (deploy/.env is git-ignored).
{
  echo "# Written by deploy/build-images.sh: the images it built on this machine."
  echo "FARM_POSTGRES_IMAGE=$postgres_image"
  echo "FARM_NODE_IMAGE=$node_image"
} >"$deploy/.env"

say "done"
podman images --format '   {{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E 'farm-(debian|dotnet|postgres|node)' >&2
cat >&2 <<EOF

Start the farm:   podman-compose -f deploy/compose.yaml up -d
Connect:          farm status --connection 'Endpoint=http://127.0.0.1:5480,http://127.0.0.1:5481,http://127.0.0.1:5482'
EOF

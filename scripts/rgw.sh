#!/usr/bin/env bash
# rgw.sh - throwaway single-node Ceph cluster (1 mon + 1 memstore OSD, no mgr)
# with a RADOS Gateway (S3) on 127.0.0.1, everything kept inside one directory.
#
# Usage:
#   rgw.sh install                 install missing Debian packages (root)
#   rgw.sh start DIR PORT          fresh cluster in DIR, S3 on 127.0.0.1:PORT;
#                                  prints S3_* lines (stdout) when S3 answers
#   rgw.sh stop DIR                stop all daemons of DIR, remove DIR (idempotent)
#   rgw.sh gateway-stop DIR        stop only radosgw (simulated outage)
#   rgw.sh gateway-start DIR       restart radosgw on the same port / same data
#   rgw.sh env DIR                 print the S3_* lines again
#   rgw.sh status DIR              daemons, RSS, health, osd stat, pools
#
# Environment:
#   RGW_ACCESS_KEY / RGW_SECRET_KEY   S3 credentials (fixed defaults below)
#   RGW_REGION        region printed as S3_REGION (RGW accepts any; default us-east-1)
#   RGW_MON_PORT      mon (msgr v2) port; default PORT+1000 (PORT-1000 if > 65535)
#   RGW_OSD_STORE     memstore (default) | bluestore (sparse file DIR/osd.0/block)
#   RGW_MEMSTORE_BYTES  size the memstore OSD reports (default 8G; RAM is only
#                     used for data actually stored; writes block near 95% full)
#   RGW_START_TIMEOUT seconds to wait for each start phase (default 120)
#
# Daemons: ceph-mon (msgr v2 only, 127.0.0.1:PORT+1000), ceph-osd (4 ports
# from 6800-7300), radosgw (beast, 127.0.0.1:PORT). No ceph-mgr: not needed for
# I/O, so `ceph -s` shows no PG stats. Object data lives in the OSD (RAM with
# memstore): it survives gateway-stop/start, not an OSD restart.
#
# Status/progress goes to stderr; only the S3_* lines go to stdout, so
#   eval "$(rgw.sh start /tmp/rgw 7480)"    or    rgw.sh start D P > s3.env
set -euo pipefail

PKGS=(ceph-mon ceph-osd radosgw ceph-common)
BINS=(ceph-mon ceph-osd radosgw radosgw-admin ceph ceph-authtool monmaptool)

: "${RGW_ACCESS_KEY:=RGWTESTACCESSKEY0001}"
: "${RGW_SECRET_KEY:=rgwTestSecretKey0000000000000000000000001}"
: "${RGW_REGION:=us-east-1}"
: "${RGW_OSD_STORE:=memstore}"
: "${RGW_MEMSTORE_BYTES:=8589934592}"
: "${RGW_START_TIMEOUT:=120}"
RGW_UID=testuser

log() { echo "rgw.sh: $*" >&2; }
die() { echo "rgw.sh: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

abspath() { realpath -m -- "$1"; }

# ---------------------------------------------------------------- install
missing_pkgs() {
  local p out=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || out+=("$p")
  done
  echo "${out[*]:-}"
}

cmd_install() {
  local miss; miss=$(missing_pkgs)
  if [ -z "$miss" ]; then log "all packages present (${PKGS[*]})"; return 0; fi
  if [ "$(id -u)" != 0 ]; then
    die "missing packages: $miss - run as root: DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $miss"
  fi
  local t0 out rc=0; t0=$(now)
  out=$(mktemp)
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $miss >"$out" 2>&1 || rc=$?
  if [ $rc != 0 ]; then
    log "apt-get install failed (rc=$rc); running apt-get update and retrying"
    apt-get update -qq >&2 || true
    rc=0
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $miss >"$out" 2>&1 || rc=$?
  fi
  grep -E '^(Need to get|After this operation)' "$out" >&2 || true
  if [ $rc != 0 ]; then tail -20 "$out" >&2; rm -f "$out"; die "apt-get install failed"; fi
  rm -f "$out"
  log "installed $miss in $(elapsed "$t0") s"
}

need_bins() {
  local b
  for b in "${BINS[@]}"; do
    command -v "$b" >/dev/null 2>&1 || die "'$b' not found; run: $0 install (packages: ${PKGS[*]})"
  done
}

# ---------------------------------------------------------------- helpers
# pids of processes started with "-c $DIR/ceph.conf" (exact argv match, read
# from /proc). Every daemon is started that way, so this finds exactly this
# DIR's daemons - also ones whose pid file is stale or missing - and never
# another cluster's. (Pid files are still written to DIR/run/NAME.pid.)
cluster_pids() { # DIR [argv0-substring]
  local dir=$1 want=${2:-} conf p a
  local -a args
  conf="$dir/ceph.conf"
  for p in /proc/[0-9]*; do
    mapfile -d '' args <"$p/cmdline" 2>/dev/null || continue
    [ ${#args[@]} -gt 0 ] || continue
    [ -z "$want" ] || [[ "${args[0]}" == *"$want"* ]] || continue
    for a in "${args[@]:1}"; do
      if [ "$a" = "$conf" ]; then echo "${p#/proc/}"; break; fi
    done
  done
}

# alive = exists and is not a zombie (a zombie has exited; its reaper - pid 1
# or a container's init - may be slow or never reap it)
alive() {
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

kill_wait() { # timeout pid...
  local t=$1; shift
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  local deadline=$(( $(date +%s) + t )) p left
  while :; do
    left=()
    for p in "$@"; do alive "$p" && left+=("$p"); done
    [ ${#left[@]} -eq 0 ] && return 0
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "SIGKILL ${left[*]} (did not exit in ${t}s)"
      kill -KILL "${left[@]}" 2>/dev/null || true
      sleep 0.2
      return 0
    fi
    sleep 0.1
  done
}

# no curl/ss/uuidgen needed: bash /dev/tcp and /proc only
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

http_code() { # anonymous GET / -> "200" when radosgw serves S3
  ( exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET / HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n' "$1" >&3
    IFS=' ' read -r -t 3 _ code _ <&3 && echo "$code" ) 2>/dev/null || true
}

uuid() { cat /proc/sys/kernel/random/uuid; }

wait_http() { # port timeout
  local port=$1 t=$2 deadline code
  deadline=$(( $(date +%s) + t ))
  while :; do
    code=$(http_code "$port")
    [ "$code" = 200 ] && return 0
    [ "$(date +%s)" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}

load_state() { # DIR -> PORT MON_PORT
  local dir=$1
  [ -f "$dir/ceph.conf" ] && [ -f "$dir/rgw.state" ] || die "$dir is not an rgw.sh cluster (no ceph.conf / rgw.state)"
  # shellcheck disable=SC1091
  . "$dir/rgw.state"
}

print_env() {
  cat <<EOF
S3_ENDPOINT=http://127.0.0.1:$PORT
S3_REGION=$RGW_REGION
S3_ACCESS_KEY_ID=$ACCESS_KEY
S3_SECRET_ACCESS_KEY=$SECRET_KEY
EOF
}

write_conf() { # dir port monport fsid
  local dir=$1 port=$2 monport=$3 fsid=$4
  cat >"$dir/ceph.conf" <<EOF
# generated by rgw.sh - single node, throwaway
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$monport]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind msgr2 = true
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $dir/keyring
run dir = $dir/run
crash dir = $dir/crash
log file = $dir/log/\$name.log
mon cluster log file = $dir/log/\$cluster.\$channel.log
# one OSD: replicas 1, few PGs, no autoscaler (no mgr)
mon allow pool size one = true
mon warn on pool no redundancy = false
mon allow pool delete = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon data avail warn = 1
mon data avail crit = 0
# every osdmap change waits for a paxos proposal (default 1 s); RGW's first
# start issues ~10 of them (pool create + application enable)
paxos propose interval = 0.05
paxos min wait = 0.01
mon warn on insecure global id reclaim allowed = false
# default 32 MiB write buffer => ~40 MiB preallocated WAL in DIR/mon.a
mon rocksdb options = write_buffer_size=4194304,compression=kNoCompression,level_compaction_dynamic_level_bytes=true

[mon]
mon data = $dir/\$name
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.asok

[osd]
osd data = $dir/\$name
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.asok
osd objectstore = $RGW_OSD_STORE
memstore device bytes = $RGW_MEMSTORE_BYTES
bluestore block create = true
bluestore block size = 21474836480
bluestore fsck on mount = false
osd memory target = 1073741824

[client.rgw]
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.asok
rgw data = $dir/rgw
rgw frontends = beast endpoint=127.0.0.1:$port
rgw thread pool size = 64
# lifecycle workers poll a lock every 5 s and delay SIGTERM shutdown ~10 s
rgw enable lc threads = false
EOF
}

start_rgw_daemon() { # dir
  local dir=$1
  radosgw -c "$dir/ceph.conf" -n client.rgw
}

# ---------------------------------------------------------------- start
START_DIR=
on_start_fail() {
  local rc=$? f
  [ "$rc" != 0 ] && [ -n "$START_DIR" ] || return 0
  log "start failed (rc=$rc); last log lines:"
  for f in "$START_DIR"/log/*.log; do
    [ -f "$f" ] && { echo "== $f" >&2; tail -5 "$f" >&2; }
  done
  # shellcheck disable=SC2046
  kill_wait 10 $(cluster_pids "$START_DIR")
  log "daemons killed; $START_DIR kept for inspection (remove with: $0 stop $START_DIR)"
}
cmd_start() {
  [ $# -eq 2 ] || die "usage: $0 start DIR PORT"
  local dir port monport fsid osduuid t0
  dir=$(abspath "$1"); port=$2
  [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "bad PORT '$port'"
  monport=${RGW_MON_PORT:-$(( port + 1000 ))}
  [ "$monport" -le 65535 ] || monport=$(( port - 1000 ))
  need_bins
  [[ "$RGW_ACCESS_KEY" =~ ^[A-Za-z0-9]{3,128}$ ]] || die "RGW_ACCESS_KEY must be 3-128 letters/digits"
  [[ "$RGW_SECRET_KEY" =~ ^[A-Za-z0-9+/]{8,128}$ ]] || die "RGW_SECRET_KEY must be 8-128 chars of [A-Za-z0-9+/]"
  t0=$(now)

  if [ -e "$dir" ]; then
    [ -d "$dir" ] || die "$dir exists and is not a directory"
    [ -z "$(cluster_pids "$dir")" ] || die "a cluster is running in $dir; run: $0 stop $dir"
    if [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/ceph.conf" ]; then
      die "$dir is not empty and not an rgw.sh cluster; refusing to wipe it"
    fi
    rm -rf "$dir"
  fi
  if [ "$port" -ge 6800 ] && [ "$port" -le 7300 ]; then
    log "warning: PORT $port is inside Ceph's daemon port range 6800-7300; the OSD may take it first"
  fi
  port_in_use "$port" && die "port $port (S3) already in use"
  port_in_use "$monport" && die "port $monport (mon, PORT+1000) already in use; set RGW_MON_PORT"

  mkdir -p "$dir"/{run,log,crash,rgw,mon.a,osd.0}
  fsid=$(uuid); osduuid=$(uuid)
  write_conf "$dir" "$port" "$monport" "$fsid"
  cat >"$dir/rgw.state" <<EOF
PORT=$port
MON_PORT=$monport
ACCESS_KEY='$RGW_ACCESS_KEY'
SECRET_KEY='$RGW_SECRET_KEY'
RGW_REGION='$RGW_REGION'
EOF
  local C=(-c "$dir/ceph.conf")
  # on failure: kill what we started, keep DIR for the logs
  START_DIR=$dir
  trap on_start_fail EXIT

  # keyring: all entities, imported into the mon's auth db by mon --mkfs
  local K="$dir/keyring"
  ceph-authtool -C "$K" -g -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$K" -g -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
      --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
  ceph-authtool "$K" -g -n osd.0 --cap mon 'allow profile osd' --cap mgr 'allow profile osd' \
      --cap osd 'allow *' >/dev/null
  ceph-authtool "$K" -g -n client.rgw --cap mon 'allow rw' --cap osd 'allow rwx' \
      --cap mgr 'allow rw' >/dev/null
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$monport]" "$dir/monmap" >/dev/null
  ceph-mon "${C[@]}" --mkfs -i a --monmap "$dir/monmap" --keyring "$K"
  ceph-mon "${C[@]}" -i a
  log "mon up on 127.0.0.1:$monport (v2) after $(elapsed "$t0") s"

  timeout "$RGW_START_TIMEOUT" ceph "${C[@]}" osd new "$osduuid" 0 >/dev/null
  ceph-osd "${C[@]}" -i 0 --mkfs --osd-uuid "$osduuid" 2>>"$dir/log/osd-mkfs.log"
  ceph-osd "${C[@]}" -i 0 2>>"$dir/log/osd-start.log"
  log "osd started ($RGW_OSD_STORE) after $(elapsed "$t0") s"

  # creates .rgw.root + zone pools and the user; blocks until PGs are active
  timeout "$RGW_START_TIMEOUT" radosgw-admin "${C[@]}" user create --uid="$RGW_UID" \
      --display-name="rgw.sh test user" --access-key="$RGW_ACCESS_KEY" \
      --secret-key="$RGW_SECRET_KEY" >/dev/null
  log "user created after $(elapsed "$t0") s"

  start_rgw_daemon "$dir"
  wait_http "$port" "$RGW_START_TIMEOUT" || die "radosgw did not answer on 127.0.0.1:$port within ${RGW_START_TIMEOUT}s"
  trap - EXIT
  log "S3 ready on http://127.0.0.1:$port after $(elapsed "$t0") s"
  load_state "$dir"
  print_env
}

# ---------------------------------------------------------------- stop
cmd_stop() {
  [ $# -eq 1 ] || die "usage: $0 stop DIR"
  local dir t0; dir=$(abspath "$1"); t0=$(now)
  # daemons are found by their command line, so a cluster whose DIR was removed under it is stopped too
  # order matters: radosgw, then the OSD (it tells the mon it is going down
  # and waits up to 5 s for an ack), then the mon and anything left over
  # shellcheck disable=SC2046
  kill_wait 15 $(cluster_pids "$dir" radosgw)
  # shellcheck disable=SC2046
  kill_wait 15 $(cluster_pids "$dir" ceph-osd)
  # shellcheck disable=SC2046
  kill_wait 15 $(cluster_pids "$dir")
  [ -e "$dir" ] || { log "$dir does not exist; its daemons (if any) are stopped"; return 0; }
  if [ -f "$dir/ceph.conf" ] || [ -z "$(ls -A "$dir")" ]; then
    rm -rf "$dir"
  else
    die "$dir is not an rgw.sh cluster; not removing it"
  fi
  log "stopped and removed $dir in $(elapsed "$t0") s"
}

cmd_gateway_stop() {
  [ $# -eq 1 ] || die "usage: $0 gateway-stop DIR"
  local dir; dir=$(abspath "$1"); load_state "$dir"
  # shellcheck disable=SC2046
  kill_wait 15 $(cluster_pids "$dir" radosgw)
  local i
  for i in $(seq 50); do port_in_use "$PORT" || break; sleep 0.1; done
  log "radosgw of $dir stopped (port $PORT closed)"
}

cmd_gateway_start() {
  [ $# -eq 1 ] || die "usage: $0 gateway-start DIR"
  local dir t0; dir=$(abspath "$1"); load_state "$dir"; t0=$(now)
  need_bins
  [ -n "$(cluster_pids "$dir" ceph-mon)" ] || die "mon of $dir is not running"
  [ -n "$(cluster_pids "$dir" ceph-osd)" ] || die "osd of $dir is not running"
  if [ -n "$(cluster_pids "$dir" radosgw)" ]; then
    log "radosgw already running"
  else
    port_in_use "$PORT" && die "port $PORT already in use"
    start_rgw_daemon "$dir"
  fi
  wait_http "$PORT" "$RGW_START_TIMEOUT" || die "radosgw did not answer on 127.0.0.1:$PORT within ${RGW_START_TIMEOUT}s"
  log "radosgw of $dir up in $(elapsed "$t0") s"
}

cmd_env() { [ $# -eq 1 ] || die "usage: $0 env DIR"; load_state "$(abspath "$1")"; print_env; }

cmd_status() {
  [ $# -eq 1 ] || die "usage: $0 status DIR"
  local dir p; dir=$(abspath "$1"); load_state "$dir"
  for p in $(cluster_pids "$dir"); do
    ps -o pid=,rss=,etime=,args= -p "$p" || true
  done
  # no mgr: `ceph -s` shows no pools/PGs (PG stats are reported via the mgr)
  timeout 20 ceph -c "$dir/ceph.conf" health || true
  timeout 20 ceph -c "$dir/ceph.conf" osd stat || true
  timeout 20 ceph -c "$dir/ceph.conf" osd pool ls || true
}

case "${1:-}" in
  install)        shift; cmd_install "$@" ;;
  start)          shift; cmd_start "$@" ;;
  stop)           shift; cmd_stop "$@" ;;
  gateway-stop)   shift; cmd_gateway_stop "$@" ;;
  gateway-start)  shift; cmd_gateway_start "$@" ;;
  env)            shift; cmd_env "$@" ;;
  status)         shift; cmd_status "$@" ;;
  *) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0" >&2; exit 2 ;;
esac

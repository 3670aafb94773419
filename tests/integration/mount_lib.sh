# Real FUSE file systems for the shared-file-system tests; source after lib.sh:
#
#   . "$(dirname "$0")/lib.sh" "$@"
#   . "$(dirname "$0")/mount_lib.sh"
#
# Each mount's FUSE daemon runs in the foreground (-f) in the background, its
# pid kept, so the test owns every process it starts; every wait is bounded.
#   sshfs_mount SRC MNT                    SRC (a local folder) through sshfs, served by
#                                          an sshd of the test's own on 127.0.0.1 (a free
#                                          port, host and client keys made in $T); no
#                                          caching, so the mount and SRC agree at once
#   bindfs_mount SRC MNT                   SRC through bindfs
#   overlayfs_mount LOWER UPPER WORK MNT   fuse-overlayfs
#   try_mount FN ARGS...                   FN ARGS (one of the above), returning 1 where it
#                                          would skip: for mounts a test can do without
#   mount_fstype MNT                       the file-system type /proc/self/mountinfo gives MNT
# Each prints the type its mount got (sshfs: fuse.sshfs; bindfs: fuse; fuse-overlayfs:
# fuse.fuse-overlayfs) and sets MOUNT_FSTYPE. Where something is missing (/dev/fuse,
# a program) or a mount fails, the test exits 77 after one line saying why.
# When the test ends (lib.sh's at_exit), each mount is unmounted (fusermount3 -u,
# fusermount -u, umount, then umount -l), its daemon stopped, then the sshd.
MOUNT_WAIT=${MOUNT_WAIT:-10} # seconds for sshd's port and for a mount to appear
MOUNT_SOFT=0                 # try_mount: return 1 instead of exiting 77
MOUNT_FSTYPE=
SSHD_PORT=
SSHD_KEY=

# mount_unavailable WHY: skip (77), or under try_mount print WHY and return 1.
mount_unavailable() {
  if ((MOUNT_SOFT)); then
    log "not mounted: $1"
    return 1
  fi
  skip "$1"
}

try_mount() {
  local rc=0
  MOUNT_SOFT=1
  "$@" || rc=$?
  MOUNT_SOFT=0
  return "$rc"
}

# need_fuse PROGRAM...: /dev/fuse usable and every PROGRAM on PATH.
need_fuse() {
  [[ -c /dev/fuse ]] || { mount_unavailable "no /dev/fuse (FUSE is not available here)"; return; }
  [[ -r /dev/fuse && -w /dev/fuse ]] || { mount_unavailable "/dev/fuse is not readable and writable by $(id -un)"; return; }
  local p
  for p in "$@"; do
    command -v "$p" >/dev/null || {
      mount_unavailable "no $p (scripts/install-deps installs sshfs openssh-server openssh-client bindfs fuse-overlayfs fuse3)"
      return
    }
  done
}

mount_fstype() {
  local m
  m=$(realpath -m "$1")
  awk -v m="$m" '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($5 == m) t = $(i + 1); break } }
    END { if (t != "") print t }' /proc/self/mountinfo
}

# Pids of PID's children (/proc/PID/task/PID/children; none where the kernel lacks it).
child_pids() { cat "/proc/$1/task/$1/children" 2>/dev/null || true; }

# stop_pid PID SECS: TERM, up to SECS for it to exit, then KILL.
stop_pid() {
  local pid=$1 deadline=$((SECONDS + $2))
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

# fuse_unmount MNT PID: unmounts MNT (bounded) and stops its daemon PID.
fuse_unmount() {
  local mnt=$1 pid=$2 deadline
  if [[ -n $(mount_fstype "$mnt") ]]; then
    timeout -k 2 10 fusermount3 -u "$mnt" 2>/dev/null || timeout -k 2 10 fusermount -u "$mnt" 2>/dev/null ||
      timeout -k 2 10 umount "$mnt" 2>/dev/null || timeout -k 2 10 umount -l "$mnt" ||
      echo "mount_lib: could not unmount $mnt" >&2
    deadline=$((SECONDS + 5)) # an unmounted daemon exits by itself
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  fi
  stop_pid "$pid" 2
}

# fuse_start NAME MNT CMD...: runs CMD (a FUSE daemon in the foreground) in the
# background and waits for MNT to appear in /proc/self/mountinfo.
fuse_start() {
  local name=$1 mnt=$2 pid deadline log
  shift 2
  log=$T/.mount-$name.log
  [[ -z $(mount_fstype "$mnt") ]] || die "$mnt is already a mount point"
  mkdir -p "$mnt"
  "$@" >"$log" 2>&1 &
  pid=$!
  at_exit "fuse_unmount $(printf %q "$mnt") $pid"
  deadline=$((SECONDS + MOUNT_WAIT))
  until [[ -n $(mount_fstype "$mnt") ]]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      mount_unavailable "$name did not mount $mnt: $(tr '\n' ' ' <"$log" | cut -c1-300)"
      return
    fi
    if ((SECONDS >= deadline)); then
      stop_pid "$pid" 2
      mount_unavailable "$name: $mnt did not appear in /proc/self/mountinfo in ${MOUNT_WAIT}s: $(tr '\n' ' ' <"$log" | cut -c1-300)"
      return
    fi
    sleep 0.1
  done
  MOUNT_FSTYPE=$(mount_fstype "$mnt")
  log "$name: $mnt mounted, mountinfo type $MOUNT_FSTYPE"
}

# start_sshd: an sshd of the test's own on 127.0.0.1 (once per test), accepting
# the key $SSHD_KEY for the current user; sets SSHD_PORT.
start_sshd() {
  [[ -z $SSHD_PORT ]] || return 0
  local sshd d=$T/.sshd pid deadline
  sshd=$(command -v sshd || echo /usr/sbin/sshd)
  [[ -x $sshd ]] || { mount_unavailable "no sshd (scripts/install-deps installs openssh-server)"; return; }
  sshd=$(realpath -e "$sshd") # sshd re-executes itself: an absolute path
  # As root, sshd wants its privilege separation folder (its service makes it).
  if [[ $(id -u) == 0 && ! -d /run/sshd ]]; then
    mkdir -p -m 755 /run/sshd || { mount_unavailable "cannot make /run/sshd for sshd"; return; }
  fi
  mkdir -p -m 700 "$d"
  ssh-keygen -q -t ed25519 -N '' -C kiln-test-host -f "$d/host_key" </dev/null &&
    ssh-keygen -q -t ed25519 -N '' -C kiln-test-client -f "$d/client_key" </dev/null ||
    { mount_unavailable "ssh-keygen failed"; return; }
  cp "$d/client_key.pub" "$d/authorized_keys"
  SSHD_KEY=$d/client_key
  for _ in 1 2 3; do # a free port can be taken between the probe and sshd's bind
    SSHD_PORT=$(free_ports 1)
    cat >"$d/sshd_config" <<EOF
Port $SSHD_PORT
ListenAddress 127.0.0.1
HostKey $d/host_key
PidFile $d/sshd.pid
AuthorizedKeysFile $d/authorized_keys
AllowUsers $(id -un)
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
UseDNS no
Subsystem sftp internal-sftp
LogLevel INFO
EOF
    "$sshd" -D -e -f "$d/sshd_config" >>"$d/sshd.log" 2>&1 &
    pid=$!
    at_exit "stop_sshd $pid"
    deadline=$((SECONDS + MOUNT_WAIT))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$SSHD_PORT") 2>/dev/null; then
        log "sshd (pid $pid) listening on 127.0.0.1:$SSHD_PORT"
        return 0
      fi
      sleep 0.1
    done
    stop_pid "$pid" 2
  done
  SSHD_PORT=
  mount_unavailable "sshd did not listen in ${MOUNT_WAIT}s: $(tail -3 "$d/sshd.log" | tr '\n' ' ')"
}

# stop_sshd PID: the listener, then any session process it left.
stop_sshd() {
  local kids
  kids=$(child_pids "$1")
  stop_pid "$1" 3
  for k in $kids; do stop_pid "$k" 2; done
}

sshfs_mount() {
  need_fuse sshfs ssh ssh-keygen || return
  start_sshd || return
  local src
  src=$(realpath -e "$1") || die "sshfs_mount: no folder $1"
  # dir_cache=no and the kernel's attribute and entry caches off: what one
  # side writes, the other sees at once (the coherence a shared cache relies
  # on); reconnect and keep-alives: a lost connection is retried, and a dead
  # one found in seconds.
  fuse_start sshfs "$2" sshfs -f -F /dev/null \
    -o "IdentityFile=$SSHD_KEY,IdentitiesOnly=yes,BatchMode=yes,StrictHostKeyChecking=no" \
    -o "UserKnownHostsFile=/dev/null,LogLevel=ERROR,ConnectTimeout=5,port=$SSHD_PORT" \
    -o reconnect,ServerAliveInterval=5,ServerAliveCountMax=2 \
    -o dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0 \
    "$(id -un)@127.0.0.1:$src" "$2"
}

bindfs_mount() {
  need_fuse bindfs || return
  local src
  src=$(realpath -e "$1") || die "bindfs_mount: no folder $1"
  fuse_start bindfs "$2" bindfs -f --no-allow-other "$src" "$2"
}

overlayfs_mount() {
  need_fuse fuse-overlayfs || return
  local lower upper work
  lower=$(realpath -e "$1") && upper=$(realpath -e "$2") && work=$(realpath -e "$3") ||
    die "overlayfs_mount: LOWER, UPPER and WORK must exist"
  fuse_start fuse-overlayfs "$4" fuse-overlayfs -f -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$4"
}

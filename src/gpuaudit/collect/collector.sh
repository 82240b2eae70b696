# gpuaudit collector: gathers every audit section of one host in a single run.
# POSIX sh; needs nothing beyond coreutils. Each section is framed by markers that carry a
# per-run nonce, its stdout and stderr are encoded (gzip then base64, base64, or hex through od)
# so that binary or non-UTF-8 output and marker-like text in logs cannot corrupt the framing,
# and it records its own exit status: a missing tool or a driver that does not answer is data,
# not a failure.
# The script always exits 0.
# GPUAUDIT_ROOT (default empty) prefixes the files it reads (/proc, /etc, /dev): used when
# auditing a mounted image, and by the simulated hosts.
# GPUAUDIT_DRIVER_ROOT (default /run/nvidia/driver; empty: none) is where a driver installed by
# a container keeps its root: on a host without an nvidia-smi of its own, the one there is run
# in that root (chroot), as the NVIDIA GPU Operator's driver container is used on its nodes.
# Output is bounded: each section's stdout and stderr to GPUAUDIT_SECTION_BYTES, all of them
# together to GPUAUDIT_OUTPUT_BYTES (later streams get what is left, or at least a small floor
# to say why they failed). A cut stream says so in its section's end marker, as
# stdout=KEPT/PRINTED (bytes).
LANG=C; LC_ALL=C; export LANG LC_ALL
N="${GPUAUDIT_NONCE:-@NONCE@}"
R="${GPUAUDIT_ROOT:-}"
T="${GPUAUDIT_TIMEOUT:-60}"
# A byte count from the environment, or the default when it is not a plain number.
ga_bytes() { case $1 in ''|*[!0-9]*|?????????????*) echo "$2" ;; *) echo "$1" ;; esac; }
# GPUAUDIT_KERNEL_LOG_LINES: the newest kernel-log lines kept, a plain number of at least 1
# (read as a byte count is). Any other value keeps the default, and the section says so: a
# value tail -n refuses would otherwise lose the whole log, and every XID in it.
KLOG_MAX=$(ga_bytes "${GPUAUDIT_KERNEL_LOG_LINES:-}" 5000)
[ "$KLOG_MAX" -ge 1 ] || KLOG_MAX=5000
# GPUAUDIT_EARLIER_BOOTS: how many boots before this one are read from the journal, a plain
# number of at least 1 (default 5); any other value keeps the default, and the section says so.
KBOOTS=$(ga_bytes "${GPUAUDIT_EARLIER_BOOTS:-}" 5)
[ "$KBOOTS" -ge 1 ] || KBOOTS=5
GA_SECTION_MAX=$(ga_bytes "${GPUAUDIT_SECTION_BYTES:-}" @SECTION_BYTES@)
GA_OUTPUT_LEFT=$(ga_bytes "${GPUAUDIT_OUTPUT_BYTES:-}" @OUTPUT_BYTES@)
GA_FLOOR=@FLOOR_BYTES@
GA_TMP=$(mktemp -d 2>/dev/null || { d="/tmp/gpuaudit.$$"; mkdir -p "$d" && echo "$d"; })
trap 'rm -rf "$GA_TMP"' EXIT

# Sections go gzipped where gzip is (a tenth of the bytes on the wire for nvidia-smi's XML);
# GPUAUDIT_COMPRESS=0 sends them plain. Each stream's base64 is one line, not base64's lines of
# 76: the controller reads and hands on every line, and an 8-GPU host would send hundreds.
if command -v base64 >/dev/null 2>&1 && command -v gzip >/dev/null 2>&1 \
    && [ "${GPUAUDIT_COMPRESS:-1}" != 0 ]; then
  ga_enc=gzb64; ga_encode() { gzip -c -n -6 | base64 | tr -d '\n'; echo; }
elif command -v base64 >/dev/null 2>&1; then
  ga_enc=b64; ga_encode() { base64 | tr -d '\n'; echo; }
else
  ga_enc=hex; ga_encode() { od -An -v -tx1 | tr -d ' \n'; echo; }
fi
ga_has() { command -v "$1" >/dev/null 2>&1; }
# Bound a command's run time where timeout(1) exists (a hung driver must not hang the audit).
# A driver that hung once hangs every later call too: after the first timeout (exit 124) the
# other bounded commands are skipped, with the same exit status, instead of each waiting T.
ga_run() {
  if [ -s "$GA_TMP/hung" ]; then
    echo "skipped: $(cat "$GA_TMP/hung") timed out after ${T}s earlier in this run" >&2
    return 124
  fi
  if ga_has timeout; then timeout "$T" "$@"; else "$@"; fi
  ga_run_rc=$?
  if [ "$ga_run_rc" = 124 ]; then
    # The tool that hung: for "chroot ROOT TOOL ...", TOOL.
    if [ "$1" = chroot ]; then echo "$3"; else echo "$1"; fi >"$GA_TMP/hung"
  fi
  return "$ga_run_rc"
}

# ga_keep FILE: stdin into FILE, at most one byte more than a section may send (so that a cut
# shows), and the count of the bytes past that into FILE.rest. The rest is read, not refused:
# the command runs to its end and its exit status stays its own.
ga_keep() {
  head -c "$((GA_SECTION_MAX + 1))" >"$1"
  wc -c >"$1.rest"
}
# ga_allowed: the bytes the next stream may send (parsers/limits.py OutputLimits.allowance).
ga_allowed() {
  ga_a=$GA_OUTPUT_LEFT
  [ "$ga_a" -lt "$GA_FLOOR" ] && ga_a=$GA_FLOOR
  [ "$ga_a" -gt "$GA_SECTION_MAX" ] && ga_a=$GA_SECTION_MAX
  echo "$ga_a"
}
# ga_put STREAM FILE: encode what the bounds let FILE send; a cut is added to ga_cut.
ga_put() {
  ga_size=$(( $(wc -c <"$2") + $(cat "$2.rest" 2>/dev/null || echo 0) ))
  [ "$ga_size" = 0 ] && return  # nothing to send: no encoder to start
  ga_lim=$(ga_allowed)
  if [ "$ga_size" -gt "$ga_lim" ]; then
    head -c "$ga_lim" <"$2" | ga_encode
    ga_cut="$ga_cut $1=$ga_lim/$ga_size"
    ga_size=$ga_lim
  else
    ga_encode <"$2"
  fi
  GA_OUTPUT_LEFT=$((GA_OUTPUT_LEFT - ga_size))
  [ "$GA_OUTPUT_LEFT" -lt 0 ] && GA_OUTPUT_LEFT=0
}
# ga_section NAME COMMAND... : run COMMAND in a subshell and frame its output, bounded. The
# command's stderr reaches its keeper through fd 3, which the command itself does not get.
ga_section() {
  ga_name=$1; shift
  rm -f "$GA_TMP/rc"
  { { ( "$@" ) 2>&3 3>&-; echo $? >"$GA_TMP/rc"; } | ga_keep "$GA_TMP/out"; } 3>&1 \
    | ga_keep "$GA_TMP/err"
  ga_rc=$(cat "$GA_TMP/rc" 2>/dev/null)
  ga_cut=""
  printf '@@%s begin %s enc=%s@@\n' "$N" "$ga_name" "$ga_enc"
  ga_put stdout "$GA_TMP/out"
  printf '@@%s stderr@@\n' "$N"
  ga_put stderr "$GA_TMP/err"
  printf '@@%s end %s%s rc=%s@@\n' "$N" "$ga_name" "$ga_cut" "$ga_rc"
}
ga_missing() { echo "$1: command not found" >&2; return 127; }
# The driver container's root (GPUAUDIT_DRIVER_ROOT above), where the host has no nvidia-smi of
# its own and that root has one: nvidia-smi runs there, with the driver's own libraries.
GA_DRIVER_ROOT=
ga_dr="${GPUAUDIT_DRIVER_ROOT-/run/nvidia/driver}"
if ! ga_has nvidia-smi && [ -n "$ga_dr" ] && [ -x "$R$ga_dr/usr/bin/nvidia-smi" ] \
    && ga_has chroot; then
  GA_DRIVER_ROOT="$R$ga_dr"
fi
ga_has_nvsmi() { ga_has nvidia-smi || [ -n "$GA_DRIVER_ROOT" ]; }
# nvidia-smi ARGS, bounded (ga_run): the host's, or the driver root's.
ga_nvsmi() {
  if [ -n "$GA_DRIVER_ROOT" ]; then ga_run chroot "$GA_DRIVER_ROOT" nvidia-smi "$@"
  else ga_run nvidia-smi "$@"; fi
}
# ga_cat PATH: print a host file (under GPUAUDIT_ROOT); errors name the host's path.
ga_cat() {
  if [ -r "$R$1" ]; then cat "$R$1"
  elif [ -e "$R$1" ]; then echo "$1: Permission denied" >&2; return 1
  else echo "$1: No such file or directory" >&2; return 1; fi
}

s_meta() {
  echo "hostname=$(hostname 2>/dev/null || ga_cat /etc/hostname 2>/dev/null)"
  echo "kernel=$(uname -r)"
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "uid=$(id -u)"
  [ -n "$GA_DRIVER_ROOT" ] && echo "driver_root=${GA_DRIVER_ROOT#"$R"}"
  # When the host booted (seconds since the epoch): what turns dmesg's seconds into dates.
  ga_cat /proc/stat 2>/dev/null | while read -r key value rest; do
    if [ "$key" = btime ]; then echo "btime=$value"; break; fi
  done
}
s_tools() {
  for t in nvidia-smi rocm-smi amd-smi dmesg journalctl systemctl dpkg-query apt-mark rpm lspci timeout python3; do
    if ga_has "$t" || { [ "$t" = nvidia-smi ] && ga_has_nvsmi; }; then echo "$t=1"
    else echo "$t=0"; fi
  done
}
s_os_release() { ga_cat /etc/os-release; }
s_nvidia() { ga_has_nvsmi || ga_missing nvidia-smi || return; ga_nvsmi "$@"; }
s_driver_proc() { ga_cat /proc/driver/nvidia/version; }
# Only the lines that matter, and only the newest KLOG_MAX of them; say when it was cut.
# A NUL byte (a damaged log record) would make grep take the whole log for binary data and
# print none of its lines: NULs are removed first, and counted (a copy goes through fd 3).
# cut: a single runaway line must not defeat the bound either. The log's first line is kept
# aside (kfirst): it tells whether the log still reaches back to boot.
ga_klog_filter() {
  { tee /dev/fd/3 | tr -d '\000' \
      | { IFS= read -r ga_l; printf '%s\n' "$ga_l" | cut -c1-256 >"$GA_TMP/kfirst"
          printf '%s\n' "$ga_l"; cat; } \
      | { grep -E 'NVRM|Xid|SXid|fallen off the bus|nvidia-peermem|amdgpu.*(error|fault|reset)'
          echo $? >"$GA_TMP/kgrep"; } \
      | cut -c1-2048 >"$GA_TMP/klog"; } 3>&1 \
    | tr -cd '\000' | wc -c >"$GA_TMP/knul"
}
# ga_klog_filtered SOURCE: whether the filter read the log (grep exits 1 when no line matches,
# more when it failed: then nothing was read).
ga_klog_filtered() {
  g=$(cat "$GA_TMP/kgrep" 2>/dev/null)
  if [ "${g:-2}" -gt 1 ]; then
    echo "the kernel log ($1) could not be filtered: grep exited ${g:-without status}" >&2
    return "${g:-2}"
  fi
}
# ga_klog_out [LINES]: the newest LINES (default KLOG_MAX) filtered lines, bounded as a stream
# is, then the log's stats line ($stats, on stderr) with what was cut.
ga_klog_out() {
  k=$(tr -d ' ' <"$GA_TMP/knul")
  [ "${k:-0}" != 0 ] && stats="$stats nul=$k"
  tail -n "${1:-$KLOG_MAX}" "$GA_TMP/klog" >"$GA_TMP/ktail"
  b=$(wc -c <"$GA_TMP/ktail" | tr -d ' ')
  lim=$(ga_allowed)
  if [ "$b" -gt "$lim" ]; then
    # Long lines, or little of the output's bound left: the newest whole lines that fit. One
    # byte more is read than fits, and its first line dropped: a partial line where the cut
    # falls inside one, only the newline before the kept bytes where it falls between two.
    tail -c "$((lim + 1))" "$GA_TMP/ktail" | tail -n +2
    stats="$stats bytes=$b max_bytes=$lim"
  else
    cat "$GA_TMP/ktail"
  fi
  echo "$stats" >&2
}
s_kernel_log() {
  src=""
  if ga_has dmesg; then
    { dmesg 2>/dev/null; echo $? >"$GA_TMP/krc"; } | ga_klog_filter
    [ "$(cat "$GA_TMP/krc")" = 0 ] && src=dmesg
  fi
  if [ -z "$src" ] && ga_has journalctl; then
    { journalctl -k -b --no-pager 2>"$GA_TMP/kjerr"; echo $? >"$GA_TMP/krc"; } | ga_klog_filter
    [ "$(cat "$GA_TMP/krc")" = 0 ] && src=journalctl
    # journalctl exits 0 with only "-- No entries --" when it may open no journal file (a user
    # in neither adm nor systemd-journal: its hint goes to stderr). The running boot's kernel
    # always logs: a log without a line is one that could not be read, never a clean one.
    f=$(cat "$GA_TMP/kfirst")
    if [ "$src" = journalctl ] && case "$f" in ""|"-- No entries --"*) true ;; *) false ;; esac; then
      h=$(grep -v '^ *$' "$GA_TMP/kjerr" | head -n 1 | cut -c1-300)
      echo "dmesg failed, and journalctl -k -b has no kernel message of the running boot: the journal is not readable here${h:+ ($h)}" >&2
      return 1
    fi
  fi
  if [ -z "$src" ]; then echo "no readable kernel log (dmesg, journalctl -k)" >&2; return 127; fi
  ga_klog_filtered "$src" || return
  n=$(wc -l <"$GA_TMP/klog" | tr -d ' ')
  if [ "$KLOG_MAX" != "${GPUAUDIT_KERNEL_LOG_LINES:-$KLOG_MAX}" ]; then
    echo "GPUAUDIT_KERNEL_LOG_LINES='$GPUAUDIT_KERNEL_LOG_LINES' is not a number of lines: the newest $KLOG_MAX are kept" >&2
  fi
  stats="source=$src lines=$n max=$KLOG_MAX"
  # A ring buffer that has wrapped (a storm of messages filled it, or dmesg -C cleared it) no
  # longer starts with the boot's first line, stamped [    0.000000]: its oldest lines, often
  # the XID that began a storm, are gone. The log is then marked incomplete (ring_start=, the
  # seconds after boot of its oldest line). dmesg stays the source: journalctl -k -b may hold
  # the lost lines, but journald can lag behind the kernel or keep the journal only in memory,
  # and the newest lines matter most; the two logs' lines in one section would count every
  # XID twice. journalctl's own lines carry no seconds after boot: its log is not judged.
  if [ "$src" = dmesg ]; then
    s=$(sed -n 's/^\[ *\([0-9]\{1,10\}\)\.[0-9]*\].*/\1/p' "$GA_TMP/kfirst")
    if [ -n "$s" ] && [ "$s" -gt 60 ]; then
      stats="$stats ring_start=$s"
      echo "the kernel ring buffer has wrapped: its oldest line is from ${s}s after boot, the lines before it are lost (journalctl -k -b may still hold them)" >&2
    fi
  fi
  ga_klog_out
}
# The boots before this one, where the journal keeps them (a persistent journal,
# /var/log/journal): the XIDs logged before the last reboots, which the running kernel's log no
# longer holds. Boots -1, -2, ... up to KBOOTS are read, newest first, until the journal has no
# more; a host rebooted twice since a GPU fell off the bus still shows it. Each boot's lines
# follow a line "-- boot -N --" (a journal line starts with its time, never with "--"), the
# oldest boot first, so that a cut keeps the newest lines: lines before the first such line
# are the boot's before it. Of all the boots' matching lines the newest KLOG_MAX are kept,
# the newest boot's first. A journal without boot -1 (kept in memory only, or a first boot)
# answers with journalctl's own reason and exit status. Each read is bounded in time as a
# tool is, but never taken for a hung driver; one that times out ends the reading (unread=-N).
s_kernel_log_previous() {
  ga_has journalctl || ga_missing journalctl || return
  if [ "$KBOOTS" != "${GPUAUDIT_EARLIER_BOOTS:-$KBOOTS}" ]; then
    echo "GPUAUDIT_EARLIER_BOOTS='$GPUAUDIT_EARLIER_BOOTS' is not a number of boots: $KBOOTS are read" >&2
  fi
  i=1; left=$KLOG_MAX; n=0; nul=0; unread=""
  while [ "$i" -le "$KBOOTS" ]; do
    set -- journalctl -k -b "-$i" --no-pager
    ga_has timeout && set -- timeout "$T" "$@"
    { "$@" 2>"$GA_TMP/jerr"; echo $? >"$GA_TMP/krc"; } | ga_klog_filter
    r=$(cat "$GA_TMP/krc")
    if [ "$r" != 0 ] && [ "$i" = 1 ]; then
      head -c 1024 "$GA_TMP/jerr" >&2
      return "$r"
    elif [ "$r" = 124 ]; then
      echo "journalctl -k -b -$i timed out after ${T}s: it and the boots before it are not read" >&2
      unread=" unread=-$i"; break
    elif [ "$r" != 0 ]; then
      break  # the journal keeps no earlier boot
    fi
    if ! ga_klog_filtered "journalctl -b -$i"; then
      [ "$i" = 1 ] && return 2
      unread=" unread=-$i"; break
    fi
    c=$(wc -l <"$GA_TMP/klog" | tr -d ' ')
    k=$(tr -d ' ' <"$GA_TMP/knul")
    n=$((n + c)); nul=$((nul + ${k:-0}))
    { echo "-- boot -$i --"; [ "$left" -gt 0 ] && tail -n "$left" "$GA_TMP/klog"; } >"$GA_TMP/kboot$i"
    left=$((left - c)); [ "$left" -lt 0 ] && left=0
    i=$((i + 1))
  done
  boots=$((i - 1)); j=$boots
  while [ "$j" -ge 1 ]; do cat "$GA_TMP/kboot$j"; j=$((j - 1)); done >"$GA_TMP/klog"
  echo "$nul" >"$GA_TMP/knul"
  stats="source=journalctl boots=$boots lines=$n max=$KLOG_MAX$unread"
  ga_klog_out "$((KLOG_MAX + boots))"
}
s_packages() {
  if ga_has dpkg-query; then
    dpkg-query -W -f='${Package}\t${Version}\t${Status}\n' 'nvidia-*' 'libnvidia-*' 'cuda-drivers*' \
      'datacenter-gpu-manager*' 'amdgpu*' 'rocm*' 2>/dev/null | grep -E ' ok installed$'
    return 0
  elif ga_has rpm; then
    rpm -qa --qf '%{NAME}\t%{VERSION}-%{RELEASE}\tinstall ok installed\n' \
      | grep -E '^(nvidia|kmod-nvidia|libnvidia|cuda-drivers|datacenter-gpu-manager|amdgpu|rocm)'
    return 0
  fi
  ga_missing dpkg-query
}
s_package_holds() {
  if ga_has apt-mark; then apt-mark showhold
  elif ga_has dnf; then dnf -q versionlock list 2>/dev/null
  elif ga_has yum; then yum -q versionlock list 2>/dev/null
  else ga_missing apt-mark; fi
}
s_sysctl() {
  for k in net.core.rmem_max net.core.wmem_max net.core.netdev_max_backlog net.ipv4.tcp_rmem \
           net.ipv4.tcp_wmem vm.swappiness vm.overcommit_memory kernel.numa_balancing \
           vm.max_map_count kernel.nmi_watchdog; do
    f="$R/proc/sys/$(echo "$k" | tr . /)"
    [ -r "$f" ] && printf '%s = %s\n' "$k" "$(tr '\t' ' ' <"$f")"
  done
  return 0
}
s_services() {
  ga_has systemctl || ga_missing systemctl || return
  for s in nvidia-persistenced nvidia-fabricmanager nvidia-dcgm dcgm dcgm-exporter; do
    # is-enabled exits non-zero for disabled units too: only an empty answer means not found.
    e=$(systemctl is-enabled "$s" 2>/dev/null)
    printf '%s\t%s\t%s\n' "$s" "$(systemctl is-active "$s" 2>/dev/null)" "${e:-not-found}"
  done
}
s_device_nodes() {
  for f in "$R"/dev/nvidia* "$R"/dev/kfd "$R"/dev/dri/renderD*; do
    [ -e "$f" ] && printf '%s %s\n' "$(stat -c '%a %U %G' "$f")" "${f#"$R"}"
  done
  return 0
}
s_lspci() { ga_has lspci || ga_missing lspci || return; lspci -D -n -d 10de: ; lspci -D -n -d 1002: ; }
s_rocm() { ga_has rocm-smi || ga_missing rocm-smi || return; ga_run rocm-smi --showallinfo --json; }
# amd-smi (rocm-smi's successor; the only tool on newer ROCm hosts): the static and the metric
# JSON one after the other. The exit status is static's when it failed, else metric's.
s_amd_smi() {
  ga_has amd-smi || ga_missing amd-smi || return
  ga_run amd-smi static --json; ga_amd_rc=$?
  ga_run amd-smi metric --json || return
  return "$ga_amd_rc"
}
# Monitoring agents (parsers/monitoring.py): the dcgm-exporter and node_exporter units, their
# processes under /proc (argv; dcgm-exporter's DCGM_EXPORTER_COLLECTORS where /proc/PID/environ
# is readable), the counters file each dcgm-exporter reads (its -f / --collectors argument,
# else that variable, else the default; through /proc/PID/root first, so a container's own
# file is read) and node_exporter's textfile directory. One TAB-separated record a line.
ga_counters() {
  f="$R/proc/$1/root$3"; from=process-root
  if [ "$1" = - ] || [ ! -r "$f" ]; then f="$R$3"; from=host; fi
  if [ -f "$f" ] && [ -r "$f" ]; then
    printf 'counters\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(wc -c <"$f" | tr -d ' ')" "$from"
    head -c 65536 "$f" | while IFS= read -r line || [ -n "$line" ]; do
      printf 'csv\t%s\n' "$line"
    done
  elif [ -e "$f" ]; then printf 'counters\t%s\t%s\t%s\tunreadable\t%s\n' "$1" "$2" "$3" "$from"
  else printf 'counters\t%s\t%s\t%s\tmissing\t%s\n' "$1" "$2" "$3" "$from"; fi
}
s_monitoring() {
  if ga_has systemctl; then
    for u in nvidia-dcgm-exporter dcgm-exporter node_exporter prometheus-node-exporter; do
      printf 'unit\t%s\t%s\n' "$u" "$(systemctl is-active "$u" 2>/dev/null)"
    done
  fi
  set -- "$R"/proc/[0-9]*
  if [ -e "$1" ]; then printf 'scan\tproc\t%s\n' "$#"; else printf 'scan\tproc\t0\n'; fi
  found=$(grep -l -x -E 'dcgm-exporter|node_exporter|prometheus-node' \
    "$R"/proc/[0-9]*/comm 2>/dev/null | head -n 16)
  dcgm_seen=0
  for c in $found; do
    d=${c%/comm}; pid=${d##*/}; name=$(head -n 1 "$c" 2>/dev/null)
    printf 'process\t%s\t%s\n' "$pid" "$name"
    args=$(tr '\000' '\n' <"$d/cmdline" 2>/dev/null | head -n 64 | cut -c1-1024)
    path=""; src=""; want=""; tdir=""; twant=""
    set -f; ga_ifs=$IFS; IFS='
'
    for a in $args; do
      printf 'arg\t%s\t%s\n' "$pid" "$a"
      if [ -n "$want" ]; then path=$a; src=$want; want=""; continue; fi
      if [ -n "$twant" ]; then tdir=$a; twant=""; continue; fi
      case $a in
        -f|--f|-collectors|--collectors) want=$a ;;
        -f=*|--f=*|-collectors=*|--collectors=*) path=${a#*=}; src=${a%%=*} ;;
        -collector.textfile.directory|--collector.textfile.directory) twant=1 ;;
        -collector.textfile.directory=*|--collector.textfile.directory=*) tdir=${a#*=} ;;
      esac
    done
    IFS=$ga_ifs; set +f
    if [ "$name" = dcgm-exporter ]; then
      dcgm_seen=1
      if [ -r "$d/environ" ]; then
        v=$(tr '\000' '\n' <"$d/environ" 2>/dev/null | grep '^DCGM_EXPORTER_COLLECTORS=' \
          | head -n 1 | cut -c1-1024)
        printf 'env\t%s\t%s\n' "$pid" "$v"
        [ -z "$path" ] && [ -n "$v" ] && { path=${v#*=}; src=DCGM_EXPORTER_COLLECTORS; }
      else
        printf 'environ\t%s\tunreadable\n' "$pid"
      fi
      [ -z "$path" ] && { path=/etc/dcgm-exporter/default-counters.csv; src=default; }
      ga_counters "$pid" "$src" "$path"
    elif [ -n "$tdir" ]; then
      st=missing; [ -d "$R$tdir" ] && st=exists
      w=readonly; [ -w "$R$tdir" ] && w=writable
      printf 'textfile\t%s\t%s\t%s\t%s\n' "$pid" "$tdir" "$st" "$w"
    fi
  done
  # A unit that runs with no process in sight (another PID namespace): its default file.
  if [ "$dcgm_seen" = 0 ] && ga_has systemctl && { systemctl is-active -q dcgm-exporter \
      || systemctl is-active -q nvidia-dcgm-exporter; } 2>/dev/null; then
    ga_counters - default /etc/dcgm-exporter/default-counters.csv
  fi
  return 0
}
# Slurm: run only where scontrol or slurmd is installed (a host without them is no Slurm node).
# The node is the short host name, as slurmd registers it, unless GPUAUDIT_SLURM_NODE names it.
ga_slurm_node() {
  if [ -n "${GPUAUDIT_SLURM_NODE:-}" ]; then echo "$GPUAUDIT_SLURM_NODE"
  else hostname -s 2>/dev/null || hostname; fi
}
# slurm.conf where Slurm looks for it: SLURM_CONF (a path as scontrol reads it), else the
# packaged paths under GPUAUDIT_ROOT; gres.conf beside it, or in slurmd's cache of a configless
# cluster. Printed paths are the host's (without GPUAUDIT_ROOT).
ga_slurm_conf() {
  if [ -n "${SLURM_CONF:-}" ]; then echo "$SLURM_CONF"; return; fi
  for f in /etc/slurm/slurm.conf /etc/slurm-llnl/slurm.conf; do
    [ -e "$R$f" ] && { echo "$R$f"; return; }
  done
  echo "$R/etc/slurm/slurm.conf"
}
ga_slurm_read() {
  if [ -r "$1" ]; then echo "read from ${1#"$R"}" >&2; cat "$1"
  else echo "${1#"$R"}: No such file or directory" >&2; return 1; fi
}
s_slurm_node() {
  ga_has scontrol || ga_missing scontrol || return
  ga_sn=$(ga_slurm_node); echo "node=$ga_sn" >&2
  ga_run scontrol show node -o "$ga_sn"
}
s_slurm_conf() {
  ga_slurm_read "$(ga_slurm_conf)" >"$GA_TMP/slurmconf" || return
  grep -iE '^[[:space:]]*(GresTypes|AccountingStorageTRES|SelectType|SelectTypeParameters|NodeName)[[:space:]]*=' "$GA_TMP/slurmconf"
  return 0
}
s_slurm_gres_conf() {
  ga_f=$(ga_slurm_conf)
  for g in "${ga_f%/*}/gres.conf" "$R/var/spool/slurmd/conf-cache/gres.conf" "$R/run/slurm/conf/gres.conf"; do
    [ -e "$g" ] && { ga_slurm_read "$g"; return; }
  done
  ga_slurm_read "${ga_f%/*}/gres.conf"
}
s_slurmd() { ga_has slurmd || ga_missing slurmd || return; ga_run slurmd "$@" 2>&1; }
# DCGM's active diagnostic, dcgmi diag -r LEVEL, where the policy asks for it (the deploy sets
# GPUAUDIT_DCGM_DIAG; unset or 0: the section is not collected) and never on a busy GPU: the
# diagnostic loads every GPU, so it runs only when nvidia-smi lists no compute process, and
# says why when it does not (parsers/dcgm_diag.py reads the key=value lines, then "output:").
# Its bound is GPUAUDIT_DCGM_DIAG_TIMEOUT, by default the level's (policy/diag.py), not T. A
# diagnostic stopped at its bound says nothing of the driver: its "hung" mark is removed so
# later sections still run. JSON (-j) first; the table where dcgmi refuses -j.
ga_diag_level() { case ${GPUAUDIT_DCGM_DIAG:-0} in 1|2|3) echo "$GPUAUDIT_DCGM_DIAG" ;; *) echo 0 ;; esac; }
ga_diag_bound() {
  case ${GPUAUDIT_DCGM_DIAG_TIMEOUT:-} in
    ''|*[!0-9]*) case $1 in 1) echo 120 ;; 2) echo 600 ;; *) echo 2700 ;; esac ;;
    *) echo "$GPUAUDIT_DCGM_DIAG_TIMEOUT" ;;
  esac
}
ga_diag_skip() { echo "state=$1"; echo "reason=$2" | head -n 1; echo "output:"; return 0; }
s_dcgm_diag() {
  ga_l=$(ga_diag_level)
  ga_has dcgmi || ga_missing dcgmi || return
  echo "level=$ga_l"
  ga_has_nvsmi || { ga_diag_skip not_checked "nvidia-smi is missing: no way to see that no compute process runs"; return; }
  ga_apps=$(ga_nvsmi --query-compute-apps=pid --format=csv,noheader 2>&1); ga_arc=$?
  [ "$ga_arc" = 0 ] || { ga_diag_skip not_checked "nvidia-smi --query-compute-apps exited $ga_arc: $ga_apps"; return; }
  ga_busy=$(echo "$ga_apps" | tr -d ' \r' | grep -v '^$')
  if echo "$ga_busy" | grep -q '[^0-9]'; then
    ga_diag_skip not_checked "nvidia-smi --query-compute-apps printed no process list: $ga_apps"; return
  elif [ -n "$ga_busy" ]; then
    echo "busy_pids=$(echo "$ga_busy" | tr '\n' ' ' | sed 's/ $//')"
    ga_diag_skip busy "compute processes run on the GPUs: the diagnostic would load them"; return
  fi
  echo "state=ran"
  T=$(ga_diag_bound "$ga_l")
  ga_run dcgmi diag -r "$ga_l" -j >"$GA_TMP/diag"; ga_drc=$?
  if [ "$ga_drc" != 0 ] && [ "$ga_drc" != 124 ] && ! grep -q '{' "$GA_TMP/diag"; then
    echo "format=text"; echo "json_rc=$ga_drc"
    ga_run dcgmi diag -r "$ga_l" >"$GA_TMP/diag"; ga_drc=$?
  else
    echo "format=json"
  fi
  [ "$ga_drc" = 124 ] && [ "$(cat "$GA_TMP/hung" 2>/dev/null)" = dcgmi ] && rm -f "$GA_TMP/hung"
  echo "output:"
  cat "$GA_TMP/diag"
  return "$ga_drc"
}
# The GPUs through NVML (pynvml) or amdsmi where the host's python3 has them: one process reads
# every device, no nvidia-smi per query. The probe (collect/nvml_probe.py) is pasted below when
# the script is built; it exits 127 when neither library is installed. GPUAUDIT_NVML=0 skips it.
s_nvml() {
  if [ "${GPUAUDIT_NVML:-1}" = 0 ]; then echo "NVML probe disabled (GPUAUDIT_NVML=0)" >&2; return 127; fi
  ga_has python3 || ga_missing python3 || return
  ga_run python3 -B - <<'GA_NVML_PROBE_END'
@NVML_PROBE@
GA_NVML_PROBE_END
}

printf '@@gpuaudit-collector 1 %s@@\n' "$N"
ga_section meta s_meta
ga_section tools s_tools
ga_section os_release s_os_release
# Before the GPU tools: a host whose tools babble must not spend the output's bound on them
# before its XID history is in.
ga_section kernel_log s_kernel_log
ga_section nvidia_smi_xml s_nvidia -q -x
# What the XML says of MIG, before later sections reuse the file: -lgipp only on MIG hosts.
ga_mig=0
grep -q '<current_mig>Enabled</current_mig>' "$GA_TMP/out" 2>/dev/null && ga_mig=1
# Where nvidia-smi gave no whole XML report (refused, crashed or cut: no closing tag), the same
# report as text: a driver that fails one format often still prints the other. Not after a
# timeout: the driver hangs, and ga_run skips every later call anyway.
if [ "$ga_rc" != 127 ] && [ "$ga_rc" != 124 ] && ! grep -q '</nvidia_smi_log>' "$GA_TMP/out"; then
  ga_section nvidia_smi_q s_nvidia -q
  grep -A2 'MIG Mode' "$GA_TMP/out" 2>/dev/null | grep -q 'Current *: *Enabled' && ga_mig=1
fi
ga_section nvml s_nvml
ga_section nvidia_topo s_nvidia topo -m
ga_section nvlink_status s_nvidia nvlink -s
ga_section nvlink_errors s_nvidia nvlink -e
ga_section mig_gi s_nvidia mig -lgi
ga_section mig_ci s_nvidia mig -lci
[ "$ga_mig" = 1 ] && ga_section mig_placements s_nvidia mig -lgipp
ga_section driver_proc s_driver_proc
ga_section packages s_packages
ga_section package_holds s_package_holds
ga_section sysctl s_sysctl
ga_section services s_services
ga_section device_nodes s_device_nodes
ga_section lspci s_lspci
# After what describes the host as it runs: its bound is what those left.
ga_section kernel_log_previous s_kernel_log_previous
ga_section rocm_smi s_rocm
ga_section amd_smi s_amd_smi
ga_section monitoring s_monitoring
if ga_has scontrol || ga_has slurmd; then
  ga_section slurm_node s_slurm_node
  ga_section slurm_conf s_slurm_conf
  ga_section slurm_gres_conf s_slurm_gres_conf
  ga_section slurmd_conf s_slurmd -C
  ga_section slurmd_gres s_slurmd -G
fi
# Last: the one section that loads the GPUs runs after every passive reading of them.
[ "$(ga_diag_level)" != 0 ] && ga_section dcgm_diag s_dcgm_diag
printf '@@%s done@@\n' "$N"
exit 0

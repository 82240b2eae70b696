# gpuaudit collector: gathers every audit section of one host in a single run.
# POSIX sh; needs nothing beyond coreutils. Each section is framed by markers that carry a
# per-run nonce, its stdout and stderr are encoded (base64, or hex through od) so that binary or
# non-UTF-8 output and marker-like text in logs cannot corrupt the framing, and it records its
# own exit status: a missing tool or a driver that does not answer is data, not a failure.
# The script always exits 0.
# GPUAUDIT_ROOT (default empty) prefixes the files it reads (/proc, /etc, /dev): used when
# auditing a mounted image, and by the simulated hosts.
# Output is bounded: each section's stdout and stderr to GPUAUDIT_SECTION_BYTES, all of them
# together to GPUAUDIT_OUTPUT_BYTES (later streams get what is left, or at least a small floor
# to say why they failed). A cut stream says so in its section's end marker, as
# stdout=KEPT/PRINTED (bytes).
LANG=C; LC_ALL=C; export LANG LC_ALL
N="${GPUAUDIT_NONCE:-@NONCE@}"
R="${GPUAUDIT_ROOT:-}"
T="${GPUAUDIT_TIMEOUT:-60}"
KLOG_MAX="${GPUAUDIT_KERNEL_LOG_LINES:-5000}"
# A byte count from the environment, or the default when it is not a plain number.
ga_bytes() { case $1 in ''|*[!0-9]*|?????????????*) echo "$2" ;; *) echo "$1" ;; esac; }
GA_SECTION_MAX=$(ga_bytes "${GPUAUDIT_SECTION_BYTES:-}" @SECTION_BYTES@)
GA_OUTPUT_LEFT=$(ga_bytes "${GPUAUDIT_OUTPUT_BYTES:-}" @OUTPUT_BYTES@)
GA_FLOOR=@FLOOR_BYTES@
GA_TMP=$(mktemp -d 2>/dev/null || { d="/tmp/gpuaudit.$$"; mkdir -p "$d" && echo "$d"; })
trap 'rm -rf "$GA_TMP"' EXIT

if command -v base64 >/dev/null 2>&1; then
  ga_enc=b64; ga_encode() { base64; }
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
  [ "$ga_run_rc" = 124 ] && echo "$1" >"$GA_TMP/hung"
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
  # When the host booted (seconds since the epoch): what turns dmesg's seconds into dates.
  ga_cat /proc/stat 2>/dev/null | while read -r key value rest; do
    if [ "$key" = btime ]; then echo "btime=$value"; break; fi
  done
}
s_tools() {
  for t in nvidia-smi rocm-smi amd-smi dmesg journalctl systemctl dpkg-query apt-mark rpm lspci timeout python3; do
    if ga_has "$t"; then echo "$t=1"; else echo "$t=0"; fi
  done
}
s_os_release() { ga_cat /etc/os-release; }
s_nvidia() { ga_has nvidia-smi || ga_missing nvidia-smi || return; ga_run nvidia-smi "$@"; }
s_driver_proc() { ga_cat /proc/driver/nvidia/version; }
# Only the lines that matter, and only the newest KLOG_MAX of them; say when it was cut.
# A NUL byte (a damaged log record) would make grep take the whole log for binary data and
# print none of its lines: NULs are removed first, and counted (a copy goes through fd 3).
# cut: a single runaway line must not defeat the bound either.
ga_klog_filter() {
  { tee /dev/fd/3 | tr -d '\000' \
      | { grep -E 'NVRM|Xid|SXid|fallen off the bus|nvidia-peermem|amdgpu.*(error|fault|reset)'
          echo $? >"$GA_TMP/kgrep"; } \
      | cut -c1-2048 >"$GA_TMP/klog"; } 3>&1 \
    | tr -cd '\000' | wc -c >"$GA_TMP/knul"
}
s_kernel_log() {
  src=""
  if ga_has dmesg; then
    { dmesg 2>/dev/null; echo $? >"$GA_TMP/krc"; } | ga_klog_filter
    [ "$(cat "$GA_TMP/krc")" = 0 ] && src=dmesg
  fi
  if [ -z "$src" ] && ga_has journalctl; then
    { journalctl -k -b --no-pager 2>/dev/null; echo $? >"$GA_TMP/krc"; } | ga_klog_filter
    [ "$(cat "$GA_TMP/krc")" = 0 ] && src=journalctl
  fi
  if [ -z "$src" ]; then echo "no readable kernel log (dmesg, journalctl -k)" >&2; return 127; fi
  # grep exits 1 when no line matches, more when it failed: then nothing was read.
  g=$(cat "$GA_TMP/kgrep" 2>/dev/null)
  if [ "${g:-2}" -gt 1 ]; then
    echo "the kernel log ($src) could not be filtered: grep exited ${g:-without status}" >&2
    return "${g:-2}"
  fi
  n=$(wc -l <"$GA_TMP/klog" | tr -d ' ')
  stats="source=$src lines=$n max=$KLOG_MAX"
  k=$(tr -d ' ' <"$GA_TMP/knul")
  [ "${k:-0}" != 0 ] && stats="$stats nul=$k"
  tail -n "$KLOG_MAX" "$GA_TMP/klog" >"$GA_TMP/ktail"
  b=$(wc -c <"$GA_TMP/ktail" | tr -d ' ')
  lim=$(ga_allowed)
  if [ "$b" -gt "$lim" ]; then
    # Long lines, or little of the output's bound left: the newest whole lines that fit.
    tail -c "$lim" "$GA_TMP/ktail" | tail -n +2
    stats="$stats bytes=$b max_bytes=$lim"
  else
    cat "$GA_TMP/ktail"
  fi
  echo "$stats" >&2
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
ga_section nvml s_nvml
ga_section nvidia_topo s_nvidia topo -m
ga_section nvlink_status s_nvidia nvlink -s
ga_section nvlink_errors s_nvidia nvlink -e
ga_section mig_gi s_nvidia mig -lgi
ga_section mig_ci s_nvidia mig -lci
ga_section driver_proc s_driver_proc
ga_section packages s_packages
ga_section package_holds s_package_holds
ga_section sysctl s_sysctl
ga_section services s_services
ga_section device_nodes s_device_nodes
ga_section lspci s_lspci
ga_section rocm_smi s_rocm
ga_section amd_smi s_amd_smi
printf '@@%s done@@\n' "$N"
exit 0

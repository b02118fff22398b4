#!/bin/sh
# The guest's agent: runs the host's jobs one at a time. As PID 1 (`pid1`, the busybox guest) it
# first mounts what a system has (cgroup2 with the memory controller for children, swap on the
# virtio disk). Protocol on /dev/ttyS1 (raw, one line each way): the host sends `run ID`, the
# agent runs /ebbtide-work/jobs/ID/cmd with sh in a fresh leaf cgroup, writes its stdout, stderr
# and exit status to out, err and rc there, kills what it left behind, answers `done ID RC`;
# `poweroff` ends the guest.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
W=/ebbtide-work
if [ "$1" = pid1 ]; then
  mount -t proc proc /proc
  mount -t sysfs sys /sys
  mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
  # The guest's /tmp and /run are its own (no host socket or leftover is seen in them); the host
  # paths under them that jobs use (a checkout in /tmp, its target directory: the host passes
  # them as ebbtide.keep=A:B) are bound aside first and moved back to their paths after.
  keep=$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^ebbtide\.keep=//p')
  kept=""
  i=0
  for p in $(echo "$keep" | tr ':' ' '); do
    mkdir -p "/.keep$i" && mount --bind "$p" "/.keep$i" && kept="$kept $i:$p"
    i=$((i + 1))
  done
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  mount -t tmpfs -o mode=755 tmpfs /run
  for e in $kept; do
    mkdir -p "${e#*:}" && mount --move "/.keep${e%%:*}" "${e#*:}"
  done
  mkdir -p /dev/pts /dev/shm
  mount -t devpts devpts /dev/pts
  mount -t tmpfs -o mode=1777 tmpfs /dev/shm
  echo "+memory +pids +cpu +io" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
    echo "+memory" > /sys/fs/cgroup/cgroup.subtree_control
  hostname ebbtide-vm 2>/dev/null
  if [ -b /dev/vda ]; then mkswap /dev/vda >/dev/null && swapon /dev/vda; fi
  ip link set lo up 2>/dev/null
fi
stty -F /dev/ttyS1 raw -echo 115200 2>/dev/null
exec 3<>/dev/ttyS1
echo "ready $(uname -r)" >&3
while read -r cmd id <&3; do
  case "$cmd" in
    run)
      d=$W/jobs/$id
      cg=/sys/fs/cgroup/ebbtide-job-$id
      mkdir -p "$cg"
      sh -c 'echo $$ > "$1"/cgroup.procs; exec sh "$2"/cmd' job "$cg" "$d" > "$d/out" 2> "$d/err" < /dev/null
      rc=$?
      echo "$rc" > "$d/rc"
      [ -e "$cg/cgroup.kill" ] && echo 1 > "$cg/cgroup.kill"
      for i in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
      echo "done $id $rc" >&3
      ;;
    poweroff)
      sync
      if [ "$1" = pid1 ]; then echo o > /proc/sysrq-trigger; else systemctl poweroff --force --force; fi
      ;;
    "") ;;
    *) echo "error unknown command '$cmd'" >&3 ;;
  esac
done

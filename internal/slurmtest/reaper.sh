# The reaper of a slurmtest cluster (reaper.go runs it with bash -c):
# its first line of input is the cluster's directory; once the rest of
# its input ends (the test closed its end of the pipe, or died), it
# kills every process that uses the directory and deletes it. Exits 0
# once nothing uses it, 1 if something still does after 10 s, 2 on a
# directory that is not a cluster's.
trap '' INT TERM HUP PIPE
IFS= read -r dir || exit 2
case $dir in
/*/verbsexp-slurm-[0-9]*-[0-9a-f]*) ;;
*) exit 2 ;;
esac
case $dir in
*[\*\?\[]*) exit 2 ;;
esac
while IFS= read -r _; do :; done

# users prints the processes whose command line or environment holds
# the directory, or whose working directory or an open file is in it;
# the pattern reaches grep through its input, so that grep's own
# command line holds no part of it, nor does this shell's.
users() {
	{
		grep -lsaF -f - /proc/[0-9]*/cmdline /proc/[0-9]*/environ <<<"$dir"
		find /proc/[0-9]*/cwd /proc/[0-9]*/fd -maxdepth 1 \( -lname "$dir" -o -lname "$dir/*" \) 2>/dev/null
	} | cut -d/ -f3 | sort -u | grep -vx -e "$$" -e "$PPID"
}

for _ in $(seq 100); do
	pids=$(users)
	if [ -z "$pids" ]; then
		rm -rf -- "$dir"
		exit 0
	fi
	kill -KILL $pids 2>/dev/null
	sleep 0.1
done
exit 1

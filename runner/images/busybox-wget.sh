#!/bin/sh
# /bin/wget of Airlock's busybox image. Debian's busybox-static 1.35 is built
# without wget's timeout feature, yet its option parser still takes -T and
# then crashes with SIGSEGV (exit 139), on any host; --timeout is refused.
# This wrapper removes "-T N", "-TN", "--timeout=N" and "--timeout N" and
# runs wget under busybox's timeout applet instead: N bounds the whole
# download (exit 143 when it fires), not each network operation.
t=""
n=$#
while [ "$n" -gt 0 ]; do
	a=$1
	shift
	n=$((n - 1))
	case $a in
	--)
		set -- "$@" --
		while [ "$n" -gt 0 ]; do
			set -- "$@" "$1"
			shift
			n=$((n - 1))
		done
		;;
	-T | --timeout)
		if [ "$n" -eq 0 ]; then
			echo "wget: option $a requires an argument" >&2
			exit 1
		fi
		t=$1
		shift
		n=$((n - 1))
		;;
	--timeout=*) t=${a#--timeout=} ;;
	-T*) t=${a#-T} ;;
	*) set -- "$@" "$a" ;;
	esac
done
case $t in
"") exec /bin/busybox wget "$@" ;;
*[!0-9]* | 0)
	echo "wget: bad timeout '$t'" >&2
	exit 1
	;;
esac
exec /bin/busybox timeout "$t" /bin/busybox wget "$@"

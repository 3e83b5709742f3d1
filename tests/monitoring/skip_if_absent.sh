#!/bin/sh
# skip_if_absent.sh PROGRAM PACKAGE ARGS...: runs PROGRAM ARGS, or exits 77
# (CTest's SKIP_RETURN_CODE) naming the Debian package when PROGRAM is absent.
program=$1 package=$2
shift 2
if [ -z "$program" ] || [ ! -x "$program" ]; then
  echo "SKIP: ${program:-the program} not found (Debian package '$package')"
  exit 77
fi
exec "$program" "$@"

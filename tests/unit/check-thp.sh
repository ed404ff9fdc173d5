#!/bin/sh
# Runs check-thp through the .sh test suffix, so that its log can be made to
# wait for the others (see tests/Makemodule.am): it switches the host's shmem
# THP mode for its run.
exec ./tests/unit/check-thp "$@"

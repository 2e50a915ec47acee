#!/bin/sh
# GIT_ASKPASS for Conveyor's clones and fetches (deployments/git.py): answer git's prompt
# from variables set only in that git process's environment, so no credential is ever
# written to disk or shown in a process's arguments.
case "$1" in
    Username*) printf '%s\n' "$CONVEYOR_GIT_USERNAME" ;;
    *) printf '%s\n' "$CONVEYOR_GIT_PASSWORD" ;;
esac

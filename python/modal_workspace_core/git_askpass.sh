#!/bin/sh
# GIT_ASKPASS of the network step of an authenticated clone or fetch (run by the agent with a
# fixed environment). It answers only git's own prompts for the configured GitHub base,
# MWC_GIT_BASE (`scheme://host[:port]`): the user name x-access-token, then the token from
# MWC_GIT_TOKEN. Any other prompt (another host, a path, another user) gets nothing and exit 1.
# The token is printed by the shell's builtin printf: it is in no argv.
base=${MWC_GIT_BASE-}
case "$base" in
  https://* | http://*) ;;
  *) exit 1 ;;
esac
scheme=${base%%://*}
authority=${base#*://}
case "$authority" in
  "" | */* | *@* | *"'"*) exit 1 ;;
esac
[ "$#" -eq 1 ] || exit 1
if [ "$1" = "Username for '$scheme://$authority': " ]; then
  printf '%s\n' x-access-token
  exit 0
fi
if [ "$1" = "Password for '$scheme://x-access-token@$authority': " ] && [ -n "${MWC_GIT_TOKEN-}" ]; then
  printf '%s\n' "$MWC_GIT_TOKEN"
  exit 0
fi
exit 1

#!/usr/bin/env bash
# Closes the RabbitMQ connections whose client-given name (connection_name) contains PATTERN, as a
# node restart or an operator's `rabbitmqctl close_connection` would, and only those: other tests
# running side by side keep theirs. Prints how many it closed; exits 1 when none matched.
#   tests/support/close_amqp_connections.sh PATTERN
# Uses scripts/services.sh rabbitmqctl (the local throwaway broker, OUTBOX_* ports as set).
set -euo pipefail
pattern=${1:?usage: close_amqp_connections.sh PATTERN}
root=$(cd "$(dirname "$0")/../.." && pwd)
ctl() { "$root/scripts/services.sh" rabbitmqctl -q "$@"; }
n=0
while IFS=$'\t' read -r pid props; do
  [[ $props == *"\"connection_name\",longstr,\"$pattern"* || $props == *"connection_name"*"$pattern"* ]] || continue
  ctl close_connection "$pid" "closed by a test" >/dev/null
  n=$((n + 1))
done < <(ctl list_connections pid client_properties)
echo "$n"
[[ $n -gt 0 ]]

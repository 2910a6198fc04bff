#!/usr/bin/env bash
# Make a private CA and TLS certificates for a Dask scheduler, its workers and a client.
#
# Usage:
#   deploy/tls/make-certs.sh [OUT_DIR] [SCHEDULER_HOST ...]
#
# OUT_DIR defaults to ./dask-tls. SCHEDULER_HOST names (DNS names or IP addresses) go into the
# scheduler certificate's subjectAltName; 127.0.0.1 and localhost are always included.
# Writes, in OUT_DIR:
#   ca.pem, ca-key.pem              the CA (keep ca-key.pem offline; it signs new certificates)
#   scheduler.pem, scheduler-key.pem
#   worker.pem, worker-key.pem
#   client.pem, client-key.pem
# Every party trusts ca.pem and presents its own certificate: dask requires both sides of a
# TLS connection to present a certificate signed by the CA, so a client without one is refused.
# Keys are written with mode 600. Certificates are valid for DAYS days (default 365).
set -euo pipefail

out_dir="${1:-dask-tls}"
shift || true
days="${DAYS:-365}"

command -v openssl >/dev/null || { echo "make-certs.sh: openssl not found" >&2; exit 1; }
mkdir -p "$out_dir"
umask 077

san="DNS:localhost,IP:127.0.0.1"
for host in "$@"; do
    if [[ "$host" =~ ^[0-9.]+$ || "$host" == *:* ]]; then
        san="$san,IP:$host"
    else
        san="$san,DNS:$host"
    fi
done

new_key() {  # ECDSA P-256: fast to generate, supported by Python's ssl module
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"
}

# The certificate authority.
new_key "$out_dir/ca-key.pem"
openssl req -x509 -new -key "$out_dir/ca-key.pem" -sha256 -days "$days" \
    -subj "/CN=streamrff dask CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$out_dir/ca.pem"

issue() {
    local name="$1" usage="$2" alt_names="$3"
    local extensions="$out_dir/$name.ext"
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
        "$usage" "$alt_names" > "$extensions"
    new_key "$out_dir/$name-key.pem"
    openssl req -new -key "$out_dir/$name-key.pem" -sha256 -subj "/CN=dask-$name" -out "$out_dir/$name.csr"
    local output  # openssl x509 -req chats on stderr; show it only if signing fails
    if ! output="$(openssl x509 -req -in "$out_dir/$name.csr" -sha256 -days "$days" \
        -CA "$out_dir/ca.pem" -CAkey "$out_dir/ca-key.pem" -CAcreateserial \
        -extfile "$extensions" -out "$out_dir/$name.pem" 2>&1)"; then
        echo "$output" >&2
        exit 1
    fi
    rm -f "$out_dir/$name.csr" "$extensions"
    openssl verify -CAfile "$out_dir/ca.pem" "$out_dir/$name.pem" >/dev/null
}

# Scheduler and workers both accept and open connections; the client only opens them.
issue scheduler "serverAuth,clientAuth" "$san"
issue worker "serverAuth,clientAuth" "DNS:localhost,IP:127.0.0.1"
issue client "clientAuth" "DNS:localhost"
rm -f "$out_dir/ca.srl"
chmod 644 "$out_dir"/ca.pem "$out_dir"/scheduler.pem "$out_dir"/worker.pem "$out_dir"/client.pem

echo "Wrote the CA and scheduler, worker and client certificates to $out_dir" >&2

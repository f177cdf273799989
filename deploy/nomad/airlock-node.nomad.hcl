# The Airlock node agent on every Nomad client: `airlock serve --node`
# in a podman task on the host network, with the capabilities it needs and
# no more. Each client also needs, in its agent configuration:
#
#   client {
#     cni_path       = "/opt/cni/bin"        # holds ptp, host-local and airlock-cni
#     cni_config_dir = "/opt/cni/config"     # holds airlock.conflist (this directory)
#   }
#   plugin "nomad-driver-podman" {
#     config { volumes { enabled = true } }
#   }
#
# and the files: /etc/airlock/node.toml (as in
# ../kubernetes/configmap.yaml), policies in /etc/airlock/policies, and
# `airlock-cni install --conf-dir /opt/cni/config --bin-dir /opt/cni/bin`
# run once, or airlock.conflist copied in and airlock-cni copied beside
# the other plugins.
job "airlock-node" {
  type     = "system"
  priority = 90

  group "agent" {
    network {
      mode = "host"
    }

    task "agent" {
      driver = "podman"

      config {
        image        = "airlock:latest"
        command      = "/usr/local/libexec/airlock/airlock"
        args         = ["serve", "--node", "--config=/etc/airlock/node.toml", "--proc-sys=/host/proc/sys"]
        network_mode = "host"
        cap_drop     = ["all"]
        # NET_ADMIN: TCX attach, nftables guards, policy routing,
        # IP_TRANSPARENT; BPF and PERFMON: the steering program;
        # NET_BIND_SERVICE: dnsd on port 53.
        cap_add         = ["net_admin", "bpf", "perfmon", "net_bind_service"]
        readonly_rootfs = true
        volumes = [
          "/sys/fs/bpf:/sys/fs/bpf",
          "/proc/sys:/host/proc/sys",
          "/run/airlock:/run/airlock",
          "/var/lib/airlock:/var/lib/airlock",
          "/etc/airlock:/etc/airlock:ro",
        ]
      }

      resources {
        cpu    = 200
        memory = 256
      }

      kill_timeout = "30s"
    }
  }
}

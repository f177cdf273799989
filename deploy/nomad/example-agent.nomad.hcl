# An AI agent's task on the Airlock network: the podman driver with CNI
# networking through airlock.conflist (ptp, then airlock-cni). The pod's
# egress goes through the node agent's proxy and dnsd under the policy
# named in AIRLOCK_POLICY (else the node's default_policy); a task whose
# policy is unknown, or whose node agent is down, fails to start.
job "example-agent" {
  type = "batch"

  group "agent" {
    network {
      mode = "cni/airlock"
      cni {
        args = {
          AIRLOCK_POLICY = "builds"
        }
      }
    }

    task "agent" {
      driver = "podman"

      config {
        image   = "registry.example.test/agents/coder:1"
        command = "/bin/sh"
        args    = ["-c", "curl -sS https://registry.example.test/ && echo reached"]
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}

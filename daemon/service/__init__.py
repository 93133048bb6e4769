"""kbatchd as a service: settings, systemd notification, health, metrics, traces, logs."""

"""The demo project ``seed_demo`` applies, declared as a projects-as-code document."""

DEMO_PROJECTS = {
    "projects": [
        {
            "slug": "demo",
            "name": "Demo",
            "concurrency": "queue",
            "deployment_timeout": "10m",
            "env": {"GREETING": "hello from Conveyor"},
            "pipelines": [
                {
                    "name": "default",
                    "description": "A few quick steps that succeed.",
                    "steps": [
                        {
                            "name": "prepare",
                            "command": 'echo "Preparing $CONVEYOR_PROJECT for '
                            '$CONVEYOR_ENVIRONMENT at $CONVEYOR_REF"; echo "$GREETING"',
                        },
                        {
                            "name": "build",
                            # Group markers and colours, as the log page shows them.
                            "command": 'for part in 1 2 3; do echo "--- building part $part"; '
                            "printf '\\033[32mok\\033[0m part %s\\n' \"$part\"; "
                            "sleep 0.3; done",
                        },
                        {
                            "name": "release",
                            "command": 'echo "released deployment $CONVEYOR_DEPLOYMENT_ID"',
                        },
                    ],
                },
                {
                    "name": "slow",
                    "description": "One step of about 60 seconds, to try cancel.",
                    "steps": [
                        {
                            "name": "wait",
                            "command": 'for i in $(seq 1 60); do echo "tick $i/60"; sleep 1; done',
                            "timeout": "5m",
                        }
                    ],
                },
                {
                    "name": "broken",
                    "description": "A step that fails.",
                    "steps": [
                        {
                            "name": "check",
                            "command": 'echo "checking..."; '
                            "printf '\\033[1;31msomething is wrong\\033[0m\\n' >&2; exit 1",
                        }
                    ],
                },
            ],
        }
    ]
}

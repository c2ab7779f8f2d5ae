from leap_agents.training.mini.main import mini_main

raise SystemExit(mini_main())

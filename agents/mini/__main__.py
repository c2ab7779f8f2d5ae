from leap_agents.mini.main import mini_main

raise SystemExit(mini_main())

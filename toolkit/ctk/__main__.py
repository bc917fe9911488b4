from ctk.cli import main

raise SystemExit(main())

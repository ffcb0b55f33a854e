from simlab.cli import main

raise SystemExit(main())

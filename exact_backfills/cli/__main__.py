from exact_backfills.cli import main
from exact_backfills.cli.ending import end

end(main())

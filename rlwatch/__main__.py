from rlwatch.cli.app import main

main()

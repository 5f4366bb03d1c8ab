from catalog.fast import main

main()

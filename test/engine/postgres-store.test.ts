/**
 * The Store contract on PostgreSQL (the test bed's database, `scripts/testbed up postgres`), the
 * same suite SQLite passes in the unit tier (proxy/store/sqlite-store.test.ts).
 */
import { postgresBackend } from "../support/store/store-backends.ts";
import { describeStoreContract } from "../support/store/store-contract.ts";

describeStoreContract(postgresBackend);

/**
 * The TokenStore contract on PostgreSQL (the test bed's database), the same suite SQLite passes in
 * the unit tier (proxy/store/sqlite-token-store.test.ts).
 */
import { postgresBackend } from "../support/store/store-backends.ts";
import { describeTokenStoreContract } from "../support/store/token-store-contract.ts";

describeTokenStoreContract(postgresBackend);
